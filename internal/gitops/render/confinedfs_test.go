package render

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// confinedTree makes a repository with a small file, a file over the limit,
// a subdirectory, a symlink inside and one out, next to a directory outside
// holding a secret; it returns the file system over the repository (file
// limit 10 bytes) and the outside directory.
func confinedTree(ctx context.Context, t *testing.T) (*ConfinedFS, string) {
	t.Helper()
	base := t.TempDir()
	repo, outside := filepath.Join(base, "repo"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(repo, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{
		filepath.Join(repo, "a.yaml"): "x", filepath.Join(repo, "big.yaml"): strings.Repeat("y", 11),
		filepath.Join(repo, "sub", "b.yaml"): "b", filepath.Join(outside, "secret"): "s3cret",
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(repo, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(repo, "in")); err != nil {
		t.Fatal(err)
	}
	c, err := NewConfinedFS(ctx, repo, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, outside
}

// TestConfinedFSOperations: every operation kustomize uses works inside the
// repository, reports a missing file as missing (naming it relative to the
// repository, never by the manager's path), refuses what leaves it (also
// through a symlink) and files over the limit, and the first refusal or
// limit is kept as the render's failure.
func TestConfinedFSOperations(t *testing.T) {
	g := NewWithT(t)
	c, outside := confinedTree(t.Context(), t)
	abs := func(rel string) string { return filepath.Join(c.Dir(), rel) }
	refused := func(err error) { g.ExpectWithOffset(1, errors.Is(err, ErrRefused)).To(BeTrue(), "%v", err) }
	missing := func(err error) {
		g.ExpectWithOffset(1, errors.Is(err, fs.ErrNotExist)).To(BeTrue(), "%v", err)
		g.ExpectWithOffset(1, err.Error()).NotTo(ContainSubstring(c.Dir()), "a manager path in a message")
	}

	f, err := c.Open(abs("a.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	b, _ := io.ReadAll(f)
	g.Expect(string(b)).To(Equal("x"))
	g.Expect(f.Close()).To(Succeed())
	_, err = c.Open("missing")
	missing(err)
	_, err = c.Open("../outside/secret")
	refused(err)
	g.Expect(c.Failure()).To(MatchError(ContainSubstring("the path leaves the repository")), "the first refusal is kept")
	_, err = c.Open("out/secret")
	refused(err)
	g.Expect(err).To(MatchError(ContainSubstring("a symlink leaves the repository")))

	b, err = c.ReadFile("a.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("x"))
	b, err = c.ReadFile("in/b.yaml")
	g.Expect(err).NotTo(HaveOccurred(), "a symlink inside is followed")
	g.Expect(string(b)).To(Equal("b"))
	_, err = c.ReadFile("big.yaml")
	g.Expect(errors.Is(err, ErrLimitExceeded)).To(BeTrue(), "%v", err)
	g.Expect(err).To(MatchError("file big.yaml size 11 exceeds the limit of 10"))
	_, err = c.ReadFile("sub")
	g.Expect(err).To(MatchError("sub: is a directory"))
	_, err = c.ReadFile("missing")
	missing(err)
	_, err = c.ReadFile(filepath.Join(outside, "secret"))
	refused(err)
	_, err = c.ReadFile("out/secret")
	refused(err)

	g.Expect(c.IsDir("sub")).To(BeTrue())
	g.Expect(c.IsDir("in")).To(BeTrue())
	g.Expect(c.IsDir("a.yaml")).To(BeFalse())
	g.Expect(c.IsDir("missing")).To(BeFalse())
	g.Expect(c.IsDir("..")).To(BeFalse())
	g.Expect(c.IsDir("out")).To(BeFalse(), "a directory through a symlink out")
	g.Expect(c.Exists("a.yaml")).To(BeTrue())
	g.Expect(c.Exists(abs("sub"))).To(BeTrue())
	g.Expect(c.Exists("missing")).To(BeFalse())
	g.Expect(c.Exists("../outside/secret")).To(BeFalse())
	g.Expect(c.Exists("out/secret")).To(BeFalse())

	names, err := c.ReadDir(".")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names).To(Equal([]string{"a.yaml", "big.yaml", "in", "out", "sub"}))
	_, err = c.ReadDir("a.yaml")
	g.Expect(err).To(HaveOccurred())
	_, err = c.ReadDir("..")
	refused(err)
	_, err = c.ReadDir("out")
	refused(err)

	d, name, err := c.CleanedAbs("sub")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(d)).To(Equal(abs("sub")))
	g.Expect(name).To(BeEmpty())
	d, name, err = c.CleanedAbs("in/b.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(d)).To(Equal(abs("sub")), "symlinks resolved")
	g.Expect(name).To(Equal("b.yaml"))
	d, name, err = c.CleanedAbs("a.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(d)).To(Equal(c.Dir()))
	g.Expect(name).To(Equal("a.yaml"))
	_, _, err = c.CleanedAbs("missing")
	g.Expect(err).To(HaveOccurred())
	_, _, err = c.CleanedAbs("out/secret")
	refused(err)

	m, err := c.Glob("sub/*.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(Equal([]string{abs("sub/b.yaml")}))
	m, err = c.Glob("*.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(Equal([]string{abs("a.yaml"), abs("big.yaml")}))
	_, err = c.Glob("[")
	g.Expect(err).To(HaveOccurred())
	_, err = c.Glob("../*")
	refused(err)

	var seen []string
	g.Expect(c.Walk(".", func(p string, fi os.FileInfo, err error) error {
		g.Expect(err).NotTo(HaveOccurred())
		rel, _ := filepath.Rel(c.Dir(), p)
		seen = append(seen, rel)
		g.Expect(fi).NotTo(BeNil())
		return nil
	})).To(Succeed())
	g.Expect(seen).To(Equal([]string{".", "a.yaml", "big.yaml", "in", "out", "sub", "sub/b.yaml"}), "symlinks listed, not followed")
	g.Expect(c.Walk("..", func(string, os.FileInfo, error) error { return nil })).To(MatchError(ContainSubstring("refused")))
	var walkErr error
	_ = c.Walk("missing", func(_ string, fi os.FileInfo, err error) error {
		g.Expect(fi).To(BeNil())
		walkErr = err
		return err
	})
	missing(walkErr)
}

// TestConfinedFSStopsWithItsContext: once the render's context is done,
// every operation fails with it (a build past its deadline stops at its next
// file access).
func TestConfinedFSStopsWithItsContext(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(t.Context())
	c, _ := confinedTree(ctx, t)
	calls := 0
	err := c.Walk(".", func(string, os.FileInfo, error) error {
		calls++
		cancel()
		return nil
	})
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(calls).To(Equal(1), "the walk went on after the cancel")
	_, err = c.ReadFile("a.yaml")
	g.Expect(err).To(MatchError(context.Canceled))
	_, err = c.Open("a.yaml")
	g.Expect(err).To(MatchError(context.Canceled))
}
