package testenv

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/setup"
)

// StartManager runs one more manager against the environment, built by
// setup as `converge run` builds it: metrics, probes, webhooks and the push
// receiver off (the suite's manager serves admission and push webhooks), 5 s
// graceful shutdown. adjust picks its controllers, shard key and the like;
// give it a ShardKey so that it does not compete with the suite's manager. The returned stop cancels it abruptly,
// waits until it has stopped and returns its error (nil when it stopped
// because of the cancel); it also runs at the end of the test.
func (e *Environment) StartManager(t testing.TB, adjust func(*setup.Options)) (stop func() error) {
	t.Helper()
	_, stop = e.StartConverge(t, adjust, nil)
	return stop
}

// StartConverge is StartManager that also hands the test what setup.New
// built; before, when not nil, runs on it before the manager starts (to add
// a runnable that tells the test the manager is running, say).
func (e *Environment) StartConverge(t testing.TB, adjust func(*setup.Options), before func(*setup.Converge) error) (cv *setup.Converge, stop func() error) {
	t.Helper()
	return e.startConverge(t, e.Config, adjust, before)
}

// StartCountedManager is StartManager whose API requests (every
// controller's client, the event recorder's, leader election's) are
// counted, apart from every other client of the process: a test measures
// what this manager sent, not what the suite's manager or an earlier
// test's leftovers did. Give it a ShardKey, and the test's objects that
// shard's label, so that it alone reconciles them.
func (e *Environment) StartCountedManager(t testing.TB, adjust func(*setup.Options)) (*Requests, func() error) {
	t.Helper()
	r := &Requests{}
	cfg := rest.CopyConfig(e.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, r: r} })
	_, stop := e.startConverge(t, cfg, adjust, nil)
	return r, stop
}

// Request is one API request a counted manager sent, with the status code
// the API server answered (0: no answer).
type Request struct {
	Method string
	// Path is the URL's path, e.g.
	// /apis/dhcp.converge.dev/v1alpha1/namespaces/ns/ippools/lan/status.
	Path string
	Code int
}

// Requests are the requests of a manager started by StartCountedManager.
type Requests struct {
	mu  sync.Mutex
	all []Request
}

// Count is the number of requests so far that match says yes to.
func (r *Requests) Count(match func(Request) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.all {
		if match(q) {
			n++
		}
	}
	return n
}

// WritesIn matches the writes (every method but GET, which lists and
// watches use too) to objects of namespace ns.
func WritesIn(ns string) func(Request) bool {
	return func(q Request) bool {
		return q.Method != http.MethodGet && strings.Contains(q.Path, "/namespaces/"+ns+"/")
	}
}

// countingTransport records every request that goes through it in r.
type countingTransport struct {
	next http.RoundTripper
	r    *Requests
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	q := Request{Method: req.Method, Path: req.URL.Path}
	if resp != nil {
		q.Code = resp.StatusCode
	}
	c.r.mu.Lock()
	c.r.all = append(c.r.all, q)
	c.r.mu.Unlock()
	return resp, err
}

// startConverge is StartConverge with the manager's rest.Config.
func (e *Environment) startConverge(t testing.TB, cfg *rest.Config, adjust func(*setup.Options), before func(*setup.Converge) error) (cv *setup.Converge, stop func() error) {
	t.Helper()
	o := setup.DefaultOptions()
	o.MetricsBindAddress, o.HealthProbeBindAddress, o.SecureMetrics = "0", "0", false
	o.Webhook.Disabled = true
	o.Receiver.BindAddress = "0"
	o.SkipControllerNameValidation = true
	// As under `converge up`: the peers tests start listen on loopback,
	// and their git repositories are file:// URLs under the temporary
	// directory. test/security narrows both to attack them.
	o.EgressAllowedCIDRs = egress.Loopback
	o.GitOps.FileRoots = []string{os.TempDir()}
	o.GracefulShutdownTimeout = 5 * time.Second
	if adjust != nil {
		adjust(&o)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	cv, err := setup.New(ctx, cfg, o)
	if err != nil {
		cancel()
		t.Fatalf("building a manager: %v", err)
	}
	if before != nil {
		if err := before(cv); err != nil {
			cancel()
			t.Fatalf("preparing the manager: %v", err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- cv.Manager.Start(ctx) }()
	var stopped bool
	var result error
	stop = func() error {
		if stopped {
			return result
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			result = err
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return cv, stop
}

// EgressArgs are the `converge run` flags that let a manager process reach
// what testenv's in-process managers reach: peers on loopback and file://
// repositories under the temporary directory.
func EgressArgs() []string {
	return []string{"--egress-allowed-cidrs", strings.Join(egress.Loopback, ","), "--git-file-roots", os.TempDir()}
}
