package git_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/git"
	"github.com/converge-dev/converge/internal/gitops/gittest"
)

func mustPolicy(t *testing.T, denied, allowed, roots []string) *egress.Policy {
	t.Helper()
	p, err := egress.New(denied, allowed, roots)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPolicyGuardsEveryTransport: with the default policy every transport
// is refused before it reads or dials (loopback is denied; a file:// path
// outside the roots is not read), the refusal says which setting the admin
// would change, and with loopback and the repository's directory allowed
// the same URLs fetch.
func TestPolicyGuardsEveryTransport(t *testing.T) {
	s := gittest.NewServer(t)
	repo := s.NewRepo(t, "app")
	repo.Commit(t, "first", map[string]string{"a.yaml": "a: 1\n"})
	daemon := s.ServeDaemon(t)
	httpURL := s.ServeHTTP(t, "", "")
	sshSrv := s.ServeSSH(t)
	sshCreds := git.Credentials{"identity": sshSrv.ClientKey, "known_hosts": sshSrv.KnownHosts}

	cases := []struct {
		name, url string
		creds     git.Credentials
		words     string
	}{
		{"ssh", sshSrv.URL + "app.git", sshCreds, egress.AllowedFlag},
		{"git daemon", daemon + "app.git", nil, egress.AllowedFlag},
		{"http", httpURL + "app.git", nil, egress.AllowedFlag},
		{"file", repo.FileURL(), nil, egress.FileRootsFlag},
	}
	denied := git.Client{Policy: mustPolicy(t, egress.DefaultDenied, nil, []string{t.TempDir()})}
	allowed := git.Client{Policy: mustPolicy(t, egress.DefaultDenied, egress.Loopback, []string{filepath.Dir(repo.Bare)})}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := denied.Resolve(t.Context(), tc.url, git.Ref{Branch: "main"}, tc.creds)
			g.Expect(errors.Is(err, egress.ErrDenied)).To(BeTrue(), "resolve: got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.words))
			r, err := allowed.Resolve(t.Context(), tc.url, git.Ref{Branch: "main"}, tc.creds)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = denied.Checkout(t.Context(), tc.url, r, tc.creds, t.TempDir())
			g.Expect(errors.Is(err, egress.ErrDenied)).To(BeTrue(), "checkout: got %v", err)
			dir := t.TempDir()
			_, err = allowed.Checkout(t.Context(), tc.url, r, tc.creds, dir)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(filepath.Join(dir, "a.yaml")).To(BeAnExistingFile())
		})
	}
}

// TestFileRootsHoldAgainstDotsAndLinks: a path that climbs out of a root
// with "..", or a symbolic link inside a root that points out of it, is
// refused as any other path outside — and the message is the same whether
// the path exists or not.
func TestFileRootsHoldAgainstDotsAndLinks(t *testing.T) {
	g := NewWithT(t)
	s := gittest.NewServer(t)
	repo := s.NewRepo(t, "outside")
	repo.Commit(t, "first", map[string]string{"a.yaml": "a: 1\n"})
	root := t.TempDir()
	g.Expect(os.Symlink(repo.Bare, filepath.Join(root, "link.git"))).To(Succeed())
	c := git.Client{Policy: mustPolicy(t, nil, nil, []string{root})}
	for _, u := range []string{
		"file://" + root + "/../" + strings.TrimPrefix(repo.Bare, "/"),
		"file://" + filepath.Join(root, "link.git"),
		repo.FileURL(),
	} {
		_, err := c.Resolve(t.Context(), u, git.Ref{Branch: "main"}, nil)
		g.Expect(errors.Is(err, egress.ErrDenied)).To(BeTrue(), "%s: got %v", u, err)
	}
	_, errMissing := c.Resolve(t.Context(), "file:///no/such/repo.git", git.Ref{Branch: "main"}, nil)
	_, errThere := c.Resolve(t.Context(), "file://"+filepath.Dir(repo.Bare)+"/../"+filepath.Base(filepath.Dir(repo.Bare))+"/outside.git", git.Ref{Branch: "main"}, nil)
	g.Expect(errMissing).To(MatchError(ContainSubstring("is outside the directories file:// sources may read")))
	g.Expect(strings.ReplaceAll(errThere.Error(), filepath.Dir(repo.Bare)+"/outside.git", "P")).
		To(Equal(strings.ReplaceAll(errMissing.Error(), "/no/such/repo.git", "P")))
	c.Policy = mustPolicy(t, nil, nil, nil)
	_, err := c.Resolve(t.Context(), repo.FileURL(), git.Ref{Branch: "main"}, nil)
	g.Expect(err).To(MatchError(ContainSubstring("file:// sources are off")))
}

// TestPolicyChecksTheAddressDialled: a name that resolved to an allowed
// address when it was checked, and to a denied one when it is dialled (DNS
// rebinding), is refused at connect time, by the http and ssh transports;
// so is a redirect from an allowed server to a denied address. No
// connection is made to a denied address.
func TestPolicyChecksTheAddressDialled(t *testing.T) {
	s := gittest.NewServer(t)
	repo := s.NewRepo(t, "app")
	repo.Commit(t, "first", map[string]string{"a.yaml": "a: 1\n"})
	httpURL := s.ServeHTTP(t, "", "")
	sshSrv := s.ServeSSH(t)
	sshCreds := git.Credentials{"identity": sshSrv.ClientKey, "known_hosts": sshSrv.KnownHosts}

	// The check's lookup says "localhost" is a documentation address
	// (never dialled); the dial resolves it to loopback, which is denied.
	p := mustPolicy(t, egress.DefaultDenied, nil, nil)
	p.Resolve = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
	}
	c := git.Client{Policy: p}
	viaName := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = net.JoinHostPort("localhost", u.Port())
		return u.String()
	}
	for name, tc := range map[string]struct {
		url   string
		creds git.Credentials
	}{
		"http": {viaName(httpURL) + "app.git", nil},
		"ssh":  {viaName(sshSrv.URL) + "app.git", sshCreds},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Resolve(t.Context(), tc.url, git.Ref{Branch: "main"}, tc.creds)
			if !errors.Is(err, egress.ErrDenied) {
				t.Fatalf("want a refusal at connect time, got %v", err)
			}
		})
	}

	t.Run("git daemon dials the address it checked", func(t *testing.T) {
		// git:// has no dial hook: the host is resolved once, checked, and
		// the URL rewritten to that address. Here the check's lookup says
		// 127.0.0.2 (allowed; nothing listens there) while the system
		// resolver would say 127.0.0.1 (denied; the daemon listens there).
		daemon := s.ServeDaemon(t)
		p := mustPolicy(t, []string{"127.0.0.1/32", "::1/128"}, nil, nil)
		p.Resolve = func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
		}
		_, err := git.Client{Policy: p}.Resolve(t.Context(), viaName(daemon)+"app.git", git.Ref{Branch: "main"}, nil)
		if err == nil || !strings.Contains(err.Error(), "127.0.0.2") {
			t.Fatalf("want the dial to go to the checked address 127.0.0.2 (and fail), got %v", err)
		}
	})

	t.Run("redirect", func(t *testing.T) {
		// An allowed server (127.0.0.2) redirects to the denied git server
		// (127.0.0.1).
		l, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("*** SKIPPING: cannot listen on 127.0.0.2: %v ***", err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, strings.TrimSuffix(httpURL, "/")+r.URL.RequestURI(), http.StatusFound)
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		c := git.Client{Policy: mustPolicy(t, []string{"127.0.0.0/8"}, []string{"127.0.0.2/32"}, nil)}
		_, err = c.Resolve(t.Context(), "http://"+l.Addr().String()+"/app.git", git.Ref{Branch: "main"}, nil)
		if !errors.Is(err, egress.ErrDenied) {
			t.Fatalf("want the redirect refused at connect time, got %v", err)
		}
	})
}
