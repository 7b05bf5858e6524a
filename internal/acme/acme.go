// Package acme obtains certificates from an ACME (RFC 8555) server with
// HTTP-01 challenges answered by Converge itself: Solver holds the pending
// key authorizations and serves them under /.well-known/acme-challenge/ on
// the manager's own listener (--acme-http01-bind-address), so no Pod is
// started per challenge.
package acme

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	xacme "golang.org/x/crypto/acme"
	"golang.org/x/time/rate"
)

// ChallengePath is where HTTP-01 answers are served.
const ChallengePath = "/.well-known/acme-challenge/"

// Solver answers HTTP-01 challenges. The replica that orders (the leader)
// holds its answers in memory; with Shared set it also publishes them
// there, and a replica asked for a token it does not hold looks it up, so
// a Service in front of several replicas may reach any of them.
type Solver struct {
	// Shared, when set, is where answers are published for the other
	// replicas.
	Shared Shared
	// lookups bounds the Shared lookups of tokens not held here: the
	// challenge port is open to the world, and a stream of made-up tokens
	// must not become a stream of API requests.
	lookups *rate.Limiter

	mu      sync.RWMutex
	answers map[string]string
	// Served counts the answers served, for tests.
	served int
}

// Shared is where a Solver publishes answers for the other replicas.
type Shared interface {
	// Publish stores keyAuth for token; it returns once a Lookup on any
	// replica finds it.
	Publish(ctx context.Context, token, keyAuth string) error
	// Withdraw removes token's answer; absent is fine.
	Withdraw(ctx context.Context, token string) error
	// Lookup returns token's answer, if one is published.
	Lookup(ctx context.Context, token string) (keyAuth string, found bool, err error)
}

// SharedLookupRate and SharedLookupBurst bound a replica's Shared lookups
// of tokens it does not hold. A CA validates each challenge from a few
// vantage points, a few times at most.
const (
	SharedLookupRate  = 20
	SharedLookupBurst = 50
)

// NewSolver returns an empty Solver.
func NewSolver() *Solver {
	return &Solver{answers: map[string]string{}, lookups: rate.NewLimiter(SharedLookupRate, SharedLookupBurst)}
}

// Present makes the solver answer token with keyAuth, and publishes the
// answer when the Solver is shared. Call it before telling the CA to
// validate.
func (s *Solver) Present(ctx context.Context, token, keyAuth string) error {
	s.mu.Lock()
	s.answers[token] = keyAuth
	s.mu.Unlock()
	if s.Shared != nil {
		if err := s.Shared.Publish(ctx, token, keyAuth); err != nil {
			return fmt.Errorf("publishing the HTTP-01 answer for the other replicas: %w", err)
		}
	}
	return nil
}

// CleanUp forgets token here and in Shared.
func (s *Solver) CleanUp(ctx context.Context, token string) error {
	s.mu.Lock()
	delete(s.answers, token)
	s.mu.Unlock()
	if s.Shared != nil {
		return s.Shared.Withdraw(ctx, token)
	}
	return nil
}

// Served returns how many challenges were answered.
func (s *Solver) Served() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.served
}

// ServeHTTP answers GET /.well-known/acme-challenge/<token>.
func (s *Solver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, ChallengePath)
	if !ok || r.Method != http.MethodGet || !validToken(token) {
		http.NotFound(w, r)
		return
	}
	s.mu.RLock()
	ka, found := s.answers[token]
	s.mu.RUnlock()
	if !found && s.Shared != nil && s.lookups.Allow() {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		ka, found, _ = s.Shared.Lookup(ctx, token)
		cancel()
	}
	if !found {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.served++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write([]byte(ka)) //nolint:gosec // a key authorization as text/plain, nosniff: RFC 8555 8.3's answer, never HTML
}

// validToken reports whether token can be an ACME token: RFC 8555 8.3 asks
// for at least 128 bits of base64url.
func validToken(token string) bool {
	if len(token) < 22 || len(token) > 256 {
		return false
	}
	for _, c := range token {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// Server serves a Solver on an address; it is a manager Runnable that runs
// on every replica (the ACME server may reach any of them).
type Server struct {
	Addr   string
	Solver *Solver
}

// NeedLeaderElection is false: every replica answers.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listening for ACME HTTP-01 on %s: %w", s.Addr, err)
	}
	srv := &http.Server{Handler: s.Solver, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// NewClient returns an ACME client for directory with the account key; kid is
// the account URL once registered. caBundle, when set, is the only trust for
// the server's TLS. directory must be allowed by allowed (DirectoryAllowed):
// otherwise NewClient returns an error wrapping ErrDirectoryNotAllowed and no
// request is ever made. Every response body the client reads is bounded by
// MaxResponseBody.
func NewClient(directory string, allowed []string, caBundle []byte, key crypto.Signer, kid string) (*xacme.Client, error) {
	if !DirectoryAllowed(directory, allowed) {
		return nil, fmt.Errorf("spec.acme.server %q: %w", directory, ErrDirectoryNotAllowed)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if len(caBundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("caBundle holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	hc := &http.Client{Transport: boundedTransport{tr}, Timeout: 30 * time.Second,
		// A redirect could lead anywhere: the directory and the URLs it
		// lists are what the admin allowed, nothing they point to.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &xacme.Client{Key: key, DirectoryURL: directory, KID: xacme.KeyID(kid), UserAgent: "converge", HTTPClient: hc}, nil
}

// Register registers (or finds) the account of the client's key and returns
// its URL.
func Register(ctx context.Context, c *xacme.Client, email string) (string, error) {
	acct := &xacme.Account{}
	if email != "" {
		acct.Contact = []string{"mailto:" + email}
	}
	a, err := c.Register(ctx, acct, xacme.AcceptTOS)
	if errors.Is(err, xacme.ErrAccountAlreadyExists) {
		a, err = c.GetReg(ctx, "")
	}
	if err != nil {
		return "", fmt.Errorf("registering the ACME account: %w", err)
	}
	return a.URI, nil
}

// Obtain orders a certificate for the names of csrDER, answers each HTTP-01
// challenge with s, and returns the chain (DER, leaf first). An error holds
// the CA's problem document when it sent one.
func Obtain(ctx context.Context, c *xacme.Client, s *Solver, dnsNames, ips []string, csrDER []byte) ([][]byte, error) {
	ids := xacme.DomainIDs(dnsNames...)
	ids = append(ids, xacme.IPIDs(ips...)...)
	if len(ids) == 0 {
		return nil, errors.New("ACME certificates need at least one DNS name or IP address")
	}
	order, err := c.AuthorizeOrder(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("creating the order: %w", err)
	}
	for _, u := range order.AuthzURLs {
		z, err := c.GetAuthorization(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("reading authorization %s: %w", u, err)
		}
		if z.Status == xacme.StatusValid {
			continue
		}
		var ch *xacme.Challenge
		for _, c := range z.Challenges {
			if c.Type == "http-01" {
				ch = c
			}
		}
		if ch == nil {
			return nil, fmt.Errorf("the server offers no http-01 challenge for %s", z.Identifier.Value)
		}
		ka, err := c.HTTP01ChallengeResponse(ch.Token)
		if err != nil {
			return nil, err
		}
		if err := s.Present(ctx, ch.Token, ka); err != nil {
			return nil, err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = s.CleanUp(cctx, ch.Token)
		}()
		if _, err := c.Accept(ctx, ch); err != nil {
			return nil, fmt.Errorf("accepting the challenge for %s: %w", z.Identifier.Value, err)
		}
		if _, err := c.WaitAuthorization(ctx, z.URI); err != nil {
			return nil, fmt.Errorf("challenge for %s: %w", z.Identifier.Value, err)
		}
	}
	if _, err := c.WaitOrder(ctx, order.URI); err != nil {
		return nil, fmt.Errorf("order %s: %w", order.URI, err)
	}
	chain, _, err := c.CreateOrderCert(ctx, order.FinalizeURL, csrDER, true)
	if err != nil {
		return nil, fmt.Errorf("finalizing the order: %w", err)
	}
	return chain, nil
}
