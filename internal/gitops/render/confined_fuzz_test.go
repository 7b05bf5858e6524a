package render

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzTree makes <tmp>/outside.yaml (the marker) and the root <tmp>/root
// with a/b.yaml, a/c/d.yaml and a symlink a/link -> target.
func fuzzTree(t *testing.T, target string) (root string) {
	t.Helper()
	tmp := t.TempDir()
	outside := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + secretMarker + "\n"
	if err := os.WriteFile(filepath.Join(tmp, "outside.yaml"), []byte(outside), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "sibling"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "sibling", "s.yaml"), []byte(outside), 0o600); err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(tmp, "root")
	write(t, root, map[string]string{
		"a/b.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
		"a/c/d.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: d\n",
	})
	if target != "" && !strings.ContainsRune(target, 0) {
		_ = os.Symlink(target, filepath.Join(root, "a", "link"))
	}
	return root
}

func fuzzSeeds(f *testing.F) {
	for _, s := range [][2]string{
		{"a/b.yaml", ""},
		{"a/link", "../../outside.yaml"},
		{"a/link/s.yaml", "../../sibling"},
		{"a/link/../../outside.yaml", "c"},
		{"../outside.yaml", ""},
		{"/etc/passwd", ""},
		{"a/link", "/etc/passwd"},
		{"a/link/d.yaml", "c"},
		{"a/link/x", "link"},
		{"a/./c/../link", ".."},
		{"a//link", "../.././../outside.yaml"},
		{"a/link/outside.yaml", "../.."},
	} {
		f.Add(s[0], s[1])
	}
}

// FuzzConfinedRead: whatever the path and whatever a committed symlink
// points to, the confined file system never returns the content of a file
// outside its root, and every path it returns is inside the root.
func FuzzConfinedRead(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, p, target string) {
		root := fuzzTree(t, target)
		cfs, err := NewConfinedFS(t.Context(), root, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer cfs.Close()
		inside := func(abs string) {
			rel, err := filepath.Rel(cfs.Dir(), abs)
			if err != nil || !filepath.IsLocal(rel) && rel != "." {
				t.Fatalf("%q (link -> %q) gave %q, outside the root", p, target, abs)
			}
		}
		if b, err := cfs.ReadFile(p); err == nil && strings.Contains(string(b), secretMarker) {
			t.Fatalf("ReadFile(%q) with link -> %q read a file outside the root", p, target)
		}
		if fh, err := cfs.Open(p); err == nil {
			buf := make([]byte, 4096)
			n, _ := fh.Read(buf)
			_ = fh.Close()
			if strings.Contains(string(buf[:n]), secretMarker) {
				t.Fatalf("Open(%q) with link -> %q opened a file outside the root", p, target)
			}
		}
		if d, file, err := cfs.CleanedAbs(p); err == nil {
			inside(filepath.Join(string(d), file))
		}
		if rel, err := cfs.Resolve(p); err == nil {
			inside(cfs.abs(rel))
		} else if !errors.Is(err, ErrRefused) && strings.Contains(err.Error(), "outside") {
			t.Fatalf("Resolve(%q): a refusal not marked ErrRefused: %v", p, err)
		}
		if names, err := cfs.Glob(p); err == nil {
			for _, n := range names {
				inside(n)
			}
		}
	})
}

// FuzzConfinedRender: a render of any path, plain or kustomize, with any
// symlink target, returns no object read outside the root.
func FuzzConfinedRender(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, p, target string) {
		root := fuzzTree(t, target)
		for _, k := range []string{"resources:\n- " + p + "\n", "configMapGenerator:\n- name: g\n  files:\n  - " + p + "\n"} {
			write(t, root, map[string]string{"k/kustomization.yaml": k})
			objs, _ := Render(t.Context(), root, "k", Options{})
			for _, o := range objs {
				b, _ := o.MarshalJSON()
				if strings.Contains(string(b), secretMarker) {
					t.Fatalf("kustomize %q with link -> %q rendered a file outside the root", k, target)
				}
			}
		}
		objs, _ := Render(t.Context(), root, p, Options{})
		for _, o := range objs {
			if o.GetName() == secretMarker {
				t.Fatalf("render of %q with link -> %q read a file outside the root", p, target)
			}
		}
	})
}
