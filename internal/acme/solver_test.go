package acme_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/converge-dev/converge/internal/acme"
)

// countingShared is an in-memory Shared that counts lookups.
type countingShared struct {
	mu      sync.Mutex
	answers map[string]string
	lookups int
}

func (c *countingShared) Publish(_ context.Context, token, keyAuth string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answers[token] = keyAuth
	return nil
}

func (c *countingShared) Withdraw(_ context.Context, token string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.answers, token)
	return nil
}

func (c *countingShared) Lookup(_ context.Context, token string) (string, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookups++
	ka, ok := c.answers[token]
	return ka, ok, nil
}

func get(s *acme.Solver, token string) int {
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, acme.ChallengePath+token, nil))
	return w.Code
}

// TestSharedLookupsAreBounded: the challenge port is open to anyone. A
// token that cannot be an ACME token costs no lookup; made-up tokens cost
// at most the burst, then nothing until the bucket refills; a published
// answer is found by a replica that does not hold it.
func TestSharedLookupsAreBounded(t *testing.T) {
	shared := &countingShared{answers: map[string]string{}}
	leader, standby := acme.NewSolver(), acme.NewSolver()
	leader.Shared, standby.Shared = shared, shared
	token := strings.Repeat("A", 43)
	if err := leader.Present(t.Context(), token, token+".thumb"); err != nil {
		t.Fatal(err)
	}
	if code := get(standby, token); code != http.StatusOK || shared.lookups != 1 {
		t.Fatalf("a published answer on a standby: HTTP %d after %d lookups; want 200 after 1", code, shared.lookups)
	}
	for _, bad := range []string{"short", strings.Repeat("a", 42) + "/", strings.Repeat("a", 42) + ".", strings.Repeat("a", 300)} {
		if code := get(standby, bad); code != http.StatusNotFound {
			t.Fatalf("token %q: HTTP %d, want 404", bad, code)
		}
	}
	if shared.lookups != 1 {
		t.Fatalf("tokens that cannot be ACME tokens caused %d lookups", shared.lookups-1)
	}
	for i := range 3 * acme.SharedLookupBurst {
		get(standby, strings.Repeat("b", 40)+strings.Repeat("c", i%10)+"x")
	}
	// The test runs in far less than a second: the bucket refills by at
	// most a few tokens meanwhile.
	// The first lookup (the published token) took one from the bucket.
	if n := shared.lookups; n < acme.SharedLookupBurst || n > acme.SharedLookupBurst+acme.SharedLookupRate {
		t.Fatalf("%d made-up tokens after one real one caused %d lookups in all; want the burst, %d", 3*acme.SharedLookupBurst, n, acme.SharedLookupBurst)
	}
	if err := leader.CleanUp(t.Context(), token); err != nil {
		t.Fatal(err)
	}
	if _, ok := shared.answers[token]; ok {
		t.Fatal("CleanUp left the published answer")
	}
}
