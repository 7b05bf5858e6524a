package artifact

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// build makes an artifact the way the GitRepository controller does: a
// TempDir of the store with files written into it.
func build(t *testing.T, s Store, ns, name string, files map[string]string) string {
	t.Helper()
	tmp, err := s.TempDir(ns, name)
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	for p, c := range files {
		full := filepath.Join(tmp, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return tmp
}

func put(t *testing.T, s Store, ns, name, rev, digest string, files map[string]string) string {
	t.Helper()
	if err := s.Put(ns, name, rev, digest, build(t, s, ns, name, files)); err != nil {
		t.Fatalf("Put %s: %v", rev, err)
	}
	return s.Path(ns, name, rev, digest)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return string(b)
}

// setAge gives an artifact's directory a modification time, the order GC
// goes by.
func setAge(t *testing.T, path string, at time.Time) {
	t.Helper()
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestKey(t *testing.T) {
	k := Key("main@sha1:abc", "sha256:def")
	if k != Key("main@sha1:abc", "sha256:def") {
		t.Fatal("Key is not deterministic")
	}
	if len(k) != 24 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Fatalf("Key %q: want 24 lower-case hex characters (a directory name)", k)
	}
	for _, c := range []struct{ rev, digest string }{
		{"main@sha1:abd", "sha256:def"}, // another revision
		{"main@sha1:abc", "sha256:deg"}, // same revision, other ignore rules
		// The separator: revision and digest do not run into each other.
		{"main@sha1:abcsha256:def", ""},
		{"main@sha1:ab", "csha256:def"},
	} {
		if Key(c.rev, c.digest) == k {
			t.Errorf("Key(%q, %q) = Key of another artifact", c.rev, c.digest)
		}
	}
}

func TestPutThenRead(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if s.Has("ns", "repo", "r1", "d1") {
		t.Fatal("Has before Put")
	}
	tmp := build(t, s, "ns", "repo", map[string]string{"a.yaml": "a: 1\n", "sub/b.yaml": "b: 2\n"})
	// Building is invisible: until Put the artifact is not there.
	if s.Has("ns", "repo", "r1", "d1") || exists(s.Path("ns", "repo", "r1", "d1")) {
		t.Fatal("artifact visible while being built")
	}
	if err := s.Put("ns", "repo", "r1", "d1", tmp); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if !s.Has("ns", "repo", "r1", "d1") {
		t.Fatal("Has false after Put")
	}
	p := s.Path("ns", "repo", "r1", "d1")
	if got := read(t, filepath.Join(p, "a.yaml")); got != "a: 1\n" {
		t.Errorf("a.yaml = %q", got)
	}
	if got := read(t, filepath.Join(p, "sub", "b.yaml")); got != "b: 2\n" {
		t.Errorf("sub/b.yaml = %q", got)
	}
	// A move, not a copy: the build directory is gone.
	if exists(tmp) {
		t.Errorf("build directory %s still exists after Put", tmp)
	}
	// Another digest or repository is another artifact.
	if s.Has("ns", "repo", "r1", "d2") || s.Has("ns", "other", "r1", "d1") || s.Has("other", "repo", "r1", "d1") {
		t.Error("Has true for an artifact never put")
	}
}

func TestTempDirIsPrivateAndBesideTheArtifacts(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	tmp, err := s.TempDir("ns", "repo")
	if err != nil {
		t.Fatal(err)
	}
	// On the same file system as the artifacts, so that Put is one rename:
	// in the repository's own directory.
	if filepath.Dir(tmp) != filepath.Dir(s.Path("ns", "repo", "r", "d")) {
		t.Errorf("TempDir %s is not in the repository directory %s", tmp, filepath.Dir(s.Path("ns", "repo", "r", "d")))
	}
	if !strings.HasPrefix(filepath.Base(tmp), ".tmp-") {
		t.Errorf("TempDir %s: want a .tmp- name, never a key", tmp)
	}
	// Private to the manager: artifacts may hold a tenant's secrets.
	for _, d := range []string{filepath.Join(s.Dir, "ns"), filepath.Join(s.Dir, "ns", "repo"), tmp} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %o: want no access for group or others", d, perm)
		}
	}
	// Two builds never share a directory.
	tmp2, err := s.TempDir("ns", "repo")
	if err != nil {
		t.Fatal(err)
	}
	if tmp2 == tmp {
		t.Error("TempDir returned the same directory twice")
	}
}

func TestTempDirFailsWhenTheStoreIsNoDirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := Store{Dir: f}
	tmp, err := s.TempDir("ns", "repo")
	if err == nil {
		t.Fatalf("TempDir under a regular file = %q, nil; want an error", tmp)
	}
	if !strings.Contains(err.Error(), "creating the artifact directory") {
		t.Errorf("error %q does not say what failed", err)
	}
}

func TestPutOfAStoredArtifactKeepsItAndDropsTheNewBuild(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	p := put(t, s, "ns", "repo", "r1", "d1", map[string]string{"a.yaml": "first\n"})
	// A second fetch of the same revision and digest (after a restart, or
	// a status update that was lost).
	tmp := build(t, s, "ns", "repo", map[string]string{"a.yaml": "second\n"})
	if err := s.Put("ns", "repo", "r1", "d1", tmp); err != nil {
		t.Fatalf("Put of a stored artifact: %v", err)
	}
	// The stored one is kept: a Sync may be rendering it right now.
	if got := read(t, filepath.Join(p, "a.yaml")); got != "first\n" {
		t.Errorf("stored artifact changed to %q", got)
	}
	if exists(tmp) {
		t.Errorf("the redundant build %s was left behind", tmp)
	}
}

func TestPutFails(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	// A build directory that is gone (removed by a failed checkout).
	missing := filepath.Join(s.Dir, "ns", "repo", ".tmp-gone")
	if err := os.MkdirAll(filepath.Dir(missing), 0o700); err != nil {
		t.Fatal(err)
	}
	err := s.Put("ns", "repo", "r1", "d1", missing)
	if err == nil {
		t.Fatal("Put of a missing directory: nil error")
	}
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "storing the artifact") {
		t.Errorf("Put error %q: want the wrapped rename error", err)
	}
	if s.Has("ns", "repo", "r1", "d1") {
		t.Error("Has true after a failed Put")
	}

	// A regular file where the artifact goes is not an artifact: Put
	// fails and keeps the build, and Has stays false.
	tmp := build(t, s, "ns", "repo", map[string]string{"a.yaml": "a\n"})
	if err := os.WriteFile(s.Path("ns", "repo", "r2", "d2"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.Has("ns", "repo", "r2", "d2") {
		t.Fatal("Has true for a regular file")
	}
	if err := s.Put("ns", "repo", "r2", "d2", tmp); err == nil {
		t.Error("Put over a regular file: nil error")
	}
	if !exists(filepath.Join(tmp, "a.yaml")) {
		t.Error("a failed Put removed the build directory")
	}
}

// gcFixture stores four artifacts of ns/repo, r1 the oldest and r4 the
// newest, and one of another repository older than all of them.
func gcFixture(t *testing.T) (Store, []string, string) {
	t.Helper()
	s := Store{Dir: t.TempDir()}
	base := time.Now().Add(-time.Hour)
	var paths []string
	for i, rev := range []string{"r1", "r2", "r3", "r4"} {
		p := put(t, s, "ns", "repo", rev, "d", map[string]string{"a.yaml": rev})
		setAge(t, p, base.Add(time.Duration(i)*time.Minute))
		paths = append(paths, p)
	}
	other := put(t, s, "ns", "other", "r0", "d", map[string]string{"a.yaml": "other"})
	setAge(t, other, base.Add(-time.Hour))
	return s, paths, other
}

func checkKept(t *testing.T, paths []string, want ...bool) {
	t.Helper()
	for i, p := range paths {
		if got := exists(p); got != want[i] {
			t.Errorf("r%d: exists = %v, want %v", i+1, got, want[i])
		}
	}
}

func TestGCKeepsTheNewest(t *testing.T) {
	s, paths, other := gcFixture(t)
	if err := s.GC("ns", "repo", 2); err != nil {
		t.Fatalf("GC: %v", err)
	}
	// By modification time, not by name or key: the two newest stay.
	checkKept(t, paths, false, false, true, true)
	if !exists(other) {
		t.Error("GC of ns/repo removed an artifact of ns/other")
	}
	if !s.Has("ns", "repo", "r4", "d") || read(t, filepath.Join(paths[3], "a.yaml")) != "r4" {
		t.Error("the newest artifact is damaged")
	}
}

func TestGCKeepsPinned(t *testing.T) {
	s, paths, _ := gcFixture(t)
	// r1 is the oldest: a Sync still renders it.
	if err := s.GC("ns", "repo", 1, Key("r1", "d")); err != nil {
		t.Fatalf("GC: %v", err)
	}
	checkKept(t, paths, true, false, false, true)

	// Pinned is by key: once unpinned, the old artifact goes.
	if err := s.GC("ns", "repo", 1); err != nil {
		t.Fatalf("GC: %v", err)
	}
	checkKept(t, paths, false, false, false, true)
}

func TestGCKeepZeroRemovesAllButPinned(t *testing.T) {
	s, paths, _ := gcFixture(t)
	if err := s.GC("ns", "repo", 0, Key("r2", "d"), Key("r3", "d")); err != nil {
		t.Fatalf("GC: %v", err)
	}
	checkKept(t, paths, false, true, true, false)
}

func TestGCOfARepositoryNeverFetched(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := s.GC("ns", "never", 2); err != nil {
		t.Errorf("GC of a repository with no directory: %v, want nil", err)
	}
	// Not even the store's root exists yet (first start).
	s = Store{Dir: filepath.Join(t.TempDir(), "not-yet")}
	if err := s.GC("ns", "never", 2); err != nil {
		t.Errorf("GC with no store directory: %v, want nil", err)
	}
}

func TestGCFailsWhenTheRepositoryIsNoDirectory(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(s.Dir, "ns"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "ns", "repo"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.GC("ns", "repo", 2); err == nil {
		t.Error("GC of a regular file: nil error, want the read error")
	}
}

func TestRemove(t *testing.T) {
	s, paths, other := gcFixture(t)
	if err := s.Remove("ns", "repo"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	checkKept(t, paths, false, false, false, false)
	if exists(filepath.Join(s.Dir, "ns", "repo")) {
		t.Error("the repository directory is left")
	}
	if !exists(other) {
		t.Error("Remove of ns/repo removed an artifact of ns/other")
	}
	// Removing what is gone is no error (a GitRepository deleted twice).
	if err := s.Remove("ns", "repo"); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}
