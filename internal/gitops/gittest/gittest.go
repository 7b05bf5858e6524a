// Package gittest serves real git repositories to tests: bare repositories
// written with the git binary, served by `git daemon` (git://), by
// `git http-backend` behind net/http/cgi with basic auth (http://), and as
// file:// URLs. Without git, tests are skipped outside CI and fail in CI.
package gittest

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi" //nolint:gosec // runs git http-backend for tests; Go >= 1.6.3 is not affected by httpoxy
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/localcp"
)

// NeedGit skips (or, with CI=true, fails) t when git is missing.
func NeedGit(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git is required in CI: %v", err)
		}
		t.Skipf("*** SKIPPING: git not installed: %v ***", err)
	}
	return p
}

// Server holds bare repositories under Root.
type Server struct {
	// Root holds <name>.git bare repositories.
	Root string
	git  string
}

// NewServer creates an empty repository root.
func NewServer(t testing.TB) *Server {
	t.Helper()
	return &Server{Root: t.TempDir(), git: NeedGit(t)}
}

// Repo is a bare repository and a working copy that pushes to it.
type Repo struct {
	// Name is the repository's name, without .git.
	Name string
	// Bare is the bare repository's directory.
	Bare string
	work string
	s    *Server
}

func (s *Server) run(dir string, args ...string) (string, error) {
	cmd := exec.Command(s.git, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=author@example.com",
		"GIT_COMMITTER_NAME=Test Author", "GIT_COMMITTER_EMAIL=author@example.com",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+s.Root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// NewRepo creates an empty bare repository <name>.git with branch main.
func (s *Server) NewRepo(t testing.TB, name string) *Repo {
	t.Helper()
	r := &Repo{Name: name, Bare: filepath.Join(s.Root, name+".git"), work: filepath.Join(t.TempDir(), name), s: s}
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", r.Bare},
		{"init", "-q", "-b", "main", r.work},
	} {
		if _, err := s.run(s.Root, args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.run(r.work, "remote", "add", "origin", r.Bare); err != nil {
		t.Fatal(err)
	}
	return r
}

// Commit writes files (a nil-like "" value with delete=true removes; see
// Delete), commits everything on the current branch and pushes. It returns
// the commit hash.
func (r *Repo) Commit(t testing.TB, msg string, files map[string]string) string {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(r.work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return r.commitAndPush(t, msg)
}

// Delete removes paths (files or directories), commits and pushes.
func (r *Repo) Delete(t testing.TB, msg string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if err := os.RemoveAll(filepath.Join(r.work, p)); err != nil {
			t.Fatal(err)
		}
	}
	return r.commitAndPush(t, msg)
}

// Tag creates a lightweight tag at HEAD and pushes it.
func (r *Repo) Tag(t testing.TB, tag string) {
	t.Helper()
	if _, err := r.s.run(r.work, "tag", tag); err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.run(r.work, "push", "-q", "origin", tag); err != nil {
		t.Fatal(err)
	}
}

func (r *Repo) commitAndPush(t testing.TB, msg string) string {
	t.Helper()
	for _, args := range [][]string{
		{"add", "-A"},
		{"commit", "-q", "--allow-empty", "-m", msg},
		{"push", "-q", "origin", "HEAD:main"},
	} {
		if _, err := r.s.run(r.work, args...); err != nil {
			t.Fatal(err)
		}
	}
	h, err := r.s.run(r.work, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Work is the repository's working tree, for content Commit cannot write
// (symlinks, sparse files); commit it with CommitWork.
func (r *Repo) Work() string { return r.work }

// CommitWork commits everything in the working tree and pushes. It returns
// the commit hash.
func (r *Repo) CommitWork(t testing.TB, msg string) string {
	t.Helper()
	return r.commitAndPush(t, msg)
}

// FileURL is the repository's file:// URL.
func (r *Repo) FileURL() string { return "file://" + r.Bare }

// ServeDaemon runs `git daemon` over Root on a free loopback port until the
// test ends and returns its base URL (git://127.0.0.1:PORT/).
func (s *Server) ServeDaemon(t testing.TB) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(s.git, "daemon", "--export-all", "--reuseaddr", "--informative-errors",
		"--listen=127.0.0.1", "--port="+strconv.Itoa(port), "--base-path="+s.Root, s.Root)
	// No stdout/stderr: the daemon's children would keep the test's pipes
	// open after it ends. Its own process group lets us stop the children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting git daemon: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("git daemon did not listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "git://" + addr + "/"
}

// ServeHTTP runs `git http-backend` (smart HTTP) over Root behind basic auth
// with user and password, until the test ends, and returns its base URL
// (http://127.0.0.1:PORT/). An empty user serves without authentication.
func (s *Server) ServeHTTP(t testing.TB, user, password string) string {
	t.Helper()
	backend := httpBackend(t, s.git)
	h := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

func httpBackend(t testing.TB, git string) string {
	t.Helper()
	out, err := exec.Command(git, "--exec-path").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("git-http-backend not found (git --exec-path: %v)", err)
	}
	t.Skip("*** SKIPPING: git-http-backend not found ***")
	return ""
}

func freePort(t testing.TB) int {
	t.Helper()
	port, err := localcp.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
