package git_test

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/git"
	"github.com/converge-dev/converge/internal/gitops/gittest"
)

func checkout(t *testing.T, url string, ref git.Ref, creds git.Credentials) (git.Resolved, git.Commit, string, error) {
	t.Helper()
	c := git.Client{}
	r, err := c.Resolve(t.Context(), url, ref, creds)
	if err != nil {
		return r, git.Commit{}, "", err
	}
	dir := t.TempDir()
	cm, err := c.Checkout(t.Context(), url, r, creds, dir)
	return r, cm, dir, err
}

func TestTransportsAndRefs(t *testing.T) {
	s := gittest.NewServer(t)
	repo := s.NewRepo(t, "app")
	first := repo.Commit(t, "first", map[string]string{"a.yaml": "a: 1\n"})
	repo.Tag(t, "v1.0.0")
	second := repo.Commit(t, "second\n\nbody", map[string]string{"a.yaml": "a: 2\n"})
	repo.Tag(t, "v1.1.0")
	repo.Tag(t, "v2.0.0-rc.1")

	daemon := s.ServeDaemon(t)
	httpURL := s.ServeHTTP(t, "user", "secret")
	creds := git.Credentials{"username": []byte("user"), "password": []byte("secret")}

	sshSrv := s.ServeSSH(t)
	sshCreds := git.Credentials{"identity": sshSrv.ClientKey, "known_hosts": sshSrv.KnownHosts}

	for _, tc := range []struct {
		name  string
		url   string
		creds git.Credentials
	}{
		{"ssh with key and known_hosts", sshSrv.URL + "app.git", sshCreds},
		{"file", repo.FileURL(), nil},
		{"git daemon", daemon + "app.git", nil},
		{"http basic auth", httpURL + "app.git", creds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r, cm, dir, err := checkout(t, tc.url, git.Ref{Branch: "main"}, tc.creds)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Revision()).To(Equal("main@sha1:" + second))
			g.Expect(cm.Hash).To(Equal(second))
			g.Expect(cm.Message).To(HavePrefix("second"))
			g.Expect(cm.Author).To(Equal("Test Author <author@example.com>"))
			b, err := os.ReadFile(filepath.Join(dir, "a.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(b)).To(Equal("a: 2\n"))
			g.Expect(filepath.Join(dir, ".git")).NotTo(BeAnExistingFile())

			r, _, dir, err = checkout(t, tc.url, git.Ref{Tag: "v1.0.0"}, tc.creds)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Revision()).To(Equal("v1.0.0@sha1:" + first))
			b, _ = os.ReadFile(filepath.Join(dir, "a.yaml"))
			g.Expect(string(b)).To(Equal("a: 1\n"))

			r, _, _, err = checkout(t, tc.url, git.Ref{SemVer: ">=1.0.0 <2.0.0"}, tc.creds)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Revision()).To(Equal("v1.1.0@sha1:"+second), "highest tag in range, pre-releases excluded")

			r, cm, dir, err = checkout(t, tc.url, git.Ref{Branch: "main", Commit: first}, tc.creds)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Revision()).To(Equal("main@sha1:" + first))
			g.Expect(cm.Hash).To(Equal(first))
			b, _ = os.ReadFile(filepath.Join(dir, "a.yaml"))
			g.Expect(string(b)).To(Equal("a: 1\n"))

			_, _, _, err = checkout(t, tc.url, git.Ref{Branch: "nope"}, tc.creds)
			g.Expect(errors.Is(err, git.ErrRefNotFound)).To(BeTrue(), "got %v", err)
		})
	}

	t.Run("ssh host key mismatch", func(t *testing.T) {
		g := NewWithT(t)
		other := s.ServeSSH(t)
		_, _, _, err := checkout(t, sshSrv.URL+"app.git", git.Ref{Branch: "main"},
			git.Credentials{"identity": sshSrv.ClientKey, "known_hosts": other.KnownHosts})
		g.Expect(err).To(HaveOccurred())
		g.Expect(errors.Is(err, git.ErrAuth)).To(BeTrue(), "got %v", err)
		_, _, _, err = checkout(t, sshSrv.URL+"app.git", git.Ref{Branch: "main"}, git.Credentials{"identity": sshSrv.ClientKey})
		g.Expect(err).To(MatchError(ContainSubstring("no known_hosts")))
		_, _, _, err = checkout(t, sshSrv.URL+"app.git", git.Ref{Branch: "main"},
			git.Credentials{"identity": other.ClientKey, "known_hosts": sshSrv.KnownHosts})
		g.Expect(errors.Is(err, git.ErrAuth)).To(BeTrue(), "wrong key: got %v", err)
	})

	t.Run("bad credentials", func(t *testing.T) {
		g := NewWithT(t)
		_, _, _, err := checkout(t, httpURL+"app.git", git.Ref{Branch: "main"}, git.Credentials{"username": []byte("user"), "password": []byte("wrong")})
		g.Expect(errors.Is(err, git.ErrAuth)).To(BeTrue(), "got %v", err)
		_, _, _, err = checkout(t, httpURL+"app.git", git.Ref{Branch: "main"}, nil)
		g.Expect(errors.Is(err, git.ErrAuth)).To(BeTrue(), "got %v", err)
	})
}

// TestCheckoutLimitsAndModes: a checkout beyond the artifact limit writes
// no file, a fetch beyond the fetch limit stops, and what is written is
// private to the manager (0700 directories, 0600 files); symlinks stay
// symlinks (renders confine them).
func TestCheckoutLimitsAndModes(t *testing.T) {
	s := gittest.NewServer(t)
	repo := s.NewRepo(t, "limits")
	files := map[string]string{"a/b/c.yaml": "c: 1\n"}
	for _, n := range []string{"n1.bin", "n2.bin", "n3.bin"} {
		noise := make([]byte, 16<<10)
		_, _ = rand.Read(noise)
		files[n] = string(noise)
	}
	repo.Commit(t, "files", files)
	if err := os.Symlink("../../other", filepath.Join(repo.Work(), "up")); err != nil {
		t.Fatal(err)
	}
	repo.CommitWork(t, "symlink")
	url := repo.FileURL()

	t.Run("artifact limit", func(t *testing.T) {
		g := NewWithT(t)
		c := git.Client{MaxArtifactSize: 40000}
		r, err := c.Resolve(t.Context(), url, git.Ref{Branch: "main"}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		dir := t.TempDir()
		_, err = c.Checkout(t.Context(), url, r, nil, dir)
		g.Expect(errors.Is(err, git.ErrTooLarge)).To(BeTrue(), "%v", err)
		g.Expect(err).To(MatchError(MatchRegexp(`the files of commit [0-9a-f]{40} \(at n\d\.bin\): \d+ bytes exceed the limit of 40000 bytes`)))
		entries, _ := os.ReadDir(dir)
		g.Expect(entries).To(BeEmpty(), "nothing is written before the sizes are checked")
	})
	t.Run("object limit", func(t *testing.T) {
		g := NewWithT(t)
		// Each object is scanned as the pack arrives: one larger than the
		// artifact limit ends the fetch before go-git indexes it.
		c := git.Client{MaxArtifactSize: 8 << 10}
		r, err := c.Resolve(t.Context(), url, git.Ref{Branch: "main"}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Checkout(t.Context(), url, r, nil, t.TempDir())
		g.Expect(errors.Is(err, git.ErrTooLarge)).To(BeTrue(), "%v", err)
		g.Expect(err).To(MatchError("an object (a file) of the fetch: 16384 bytes exceed the limit of 8192 bytes"))
	})
	t.Run("fetch limit", func(t *testing.T) {
		g := NewWithT(t)
		c := git.Client{MaxFetchSize: 16 << 10}
		r, err := c.Resolve(t.Context(), url, git.Ref{Branch: "main"}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Checkout(t.Context(), url, r, nil, t.TempDir())
		g.Expect(errors.Is(err, git.ErrTooLarge)).To(BeTrue(), "%v", err)
		g.Expect(err).To(MatchError(MatchRegexp(`fetch: \d+ bytes exceed the limit of 16384 bytes`)))
	})
	t.Run("modes", func(t *testing.T) {
		g := NewWithT(t)
		_, _, dir, err := checkout(t, url, git.Ref{Branch: "main"}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		for p, want := range map[string]os.FileMode{"a": 0o700 | os.ModeDir, "a/b": 0o700 | os.ModeDir, "a/b/c.yaml": 0o600, "n1.bin": 0o600} {
			fi, err := os.Lstat(filepath.Join(dir, p))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fi.Mode()).To(Equal(want), p)
		}
		target, err := os.Readlink(filepath.Join(dir, "up"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(target).To(Equal("../../other"))
		g.Expect(filepath.Join(dir, ".git")).NotTo(BeAnExistingFile())
	})
}
