package gitrepository

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestApplyIgnore: .gitignore semantics, including the negation the
// examples/ GitRepository uses to keep only examples/.
func TestApplyIgnore(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	for _, p := range []string{"README.md", "docs/a.md", "examples/quick-tour/ns.yaml", "internal/x.go", "a/b/secret.key"} {
		g.Expect(os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644)).To(Succeed())
	}
	before, err := dirDigest(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applyIgnore(dir, "# keep only the examples\n/*\n!/examples/\n")).To(Succeed())
	var left []string
	g.Expect(filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			left = append(left, filepath.ToSlash(rel))
		}
		return err
	})).To(Succeed())
	g.Expect(left).To(Equal([]string{"examples/quick-tour/ns.yaml"}))
	after, err := dirDigest(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).NotTo(Equal(before))

	dir2 := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(dir2, "a", "b"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir2, "a", "b", "secret.key"), []byte("x"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir2, "a", "keep.yaml"), []byte("x"), 0o644)).To(Succeed())
	g.Expect(applyIgnore(dir2, "*.key\n")).To(Succeed())
	g.Expect(filepath.Join(dir2, "a", "b", "secret.key")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(dir2, "a", "keep.yaml")).To(BeAnExistingFile())
}
