package replicas

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBuildUsesThePrebuiltBinary: with CONVERGE_EXE set (as `make test`
// sets it after `make build`), Build compiles nothing and hands out that
// binary in the caller's directory, so the caller may remove its
// directory without touching bin/.
func TestBuildUsesThePrebuiltBinary(t *testing.T) {
	src := filepath.Join(t.TempDir(), "converge")
	if err := os.WriteFile(src, []byte("prebuilt"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ExeEnv, src)
	dir := t.TempDir()
	// A root with no module: compiling there fails, so only the prebuilt
	// binary can make Build succeed.
	exe, err := Build(t.Context(), t.TempDir(), dir)
	if err != nil {
		t.Fatalf("Build with %s set: %v", ExeEnv, err)
	}
	if filepath.Dir(exe) != dir {
		t.Fatalf("Build returned %s, want a file in %s", exe, dir)
	}
	got, err := os.ReadFile(exe)
	if err != nil || string(got) != "prebuilt" {
		t.Fatalf("Build's binary holds %q (%v), want the prebuilt one", got, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(src); err != nil {
		t.Fatalf("removing the caller's directory removed the prebuilt binary: %v", err)
	}

	t.Setenv(ExeEnv, filepath.Join(t.TempDir(), "missing"))
	if _, err := Build(t.Context(), t.TempDir(), t.TempDir()); err == nil {
		t.Fatal("Build with a missing prebuilt binary succeeded")
	}
}
