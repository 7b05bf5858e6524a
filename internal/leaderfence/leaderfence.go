// Package leaderfence is the leader write fence of the Converge manager:
// the Lease timings of --leader-elect and their safety rules, the Lease lock
// that opens the fence on every renewal the API server accepted, and the
// transport that refuses a controller's writes once this replica is no
// longer certainly the leader. internal/setup wires it; nothing here knows
// the controllers.
package leaderfence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	gosync "sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Default Lease timings. A SIGKILLed leader is replaced after at most
// LeaseDuration plus one RetryPeriod (≈ 3.6 s with jitter); a leader whose
// renewals fail stops writing RenewDeadline after its last successful
// renewal was sent, a full second before any other replica may take the
// Lease. Each replica costs the API server one request per RetryPeriod
// (the leader: a Lease update; a standby: a Lease get), 2 requests/s.
const (
	DefaultLeaseDuration = 3 * time.Second
	DefaultRenewDeadline = 2 * time.Second
	DefaultRetryPeriod   = 500 * time.Millisecond
)

// fenceMargin is the least time between the fence closing (RenewDeadline
// after the last renewal was sent) and another replica being able to take
// the Lease (LeaseDuration after it saw that renewal): it covers a write
// already on the wire when the fence closed.
const fenceMargin = 500 * time.Millisecond

// Timings are the Lease timings of --leader-elect.
type Timings struct {
	// LeaseDuration is how long a standby waits, after it last saw the
	// Lease renewed, before it takes it.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// steps down; its write fence closes this long after the last renewal
	// that succeeded was sent.
	RenewDeadline time.Duration
	// RetryPeriod is how often the leader renews and a standby tries to
	// acquire.
	RetryPeriod time.Duration
}

// Validate refuses timings under which two replicas could write at once,
// or under which the leader would step down between two healthy renewals.
func (t Timings) Validate() error {
	switch {
	case t.LeaseDuration <= 0 || t.RenewDeadline <= 0 || t.RetryPeriod <= 0:
		return fmt.Errorf("--leader-elect-lease-duration (%s), --leader-elect-renew-deadline (%s) and --leader-elect-retry-period (%s) must be positive",
			t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
	case t.LeaseDuration-t.RenewDeadline < fenceMargin:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must exceed --leader-elect-renew-deadline (%s) by at least %s: "+
			"the leader stops writing at the renew deadline, and a write in flight then must land before another replica may take the Lease",
			t.LeaseDuration, t.RenewDeadline, fenceMargin)
	case t.RenewDeadline < 2*t.RetryPeriod:
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be at least twice --leader-elect-retry-period (%s): "+
			"otherwise one slow renewal makes the leader stop writing and step down", t.RenewDeadline, t.RetryPeriod)
	}
	return nil
}

// Fence lets controller writes through only while this replica is
// certainly the leader: the last Lease renewal that succeeded was sent less
// than RenewDeadline ago, measured on the monotonic clock (a paused or
// starved process sees the time it lost). Reads always pass. A nil Fence
// (no leader election) lets everything through.
type Fence struct {
	renewDeadline time.Duration

	mu   gosync.Mutex
	sent time.Time // monotonic; zero while not leading
}

// NewFence returns a closed fence that opens for renewDeadline after each
// successful renewal.
func NewFence(renewDeadline time.Duration) *Fence {
	return &Fence{renewDeadline: renewDeadline}
}

// Renewed records a renewal sent at t that the API server accepted (the
// Lease lock calls it; tests open the fence with it).
func (f *Fence) Renewed(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.sent) {
		f.sent = t
	}
}

// revoke closes the fence (the Lease was released).
func (f *Fence) revoke() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = time.Time{}
}

// Expiry is when the fence closes; the zero time when it is closed.
func (f *Fence) Expiry() time.Time {
	if f == nil {
		return time.Time{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sent.IsZero() {
		return time.Time{}
	}
	return f.sent.Add(f.renewDeadline)
}

// Open reports whether a write may go out now.
func (f *Fence) Open() bool {
	if f == nil {
		return true
	}
	e := f.Expiry()
	return !e.IsZero() && time.Now().Before(e)
}

// ErrFenced is returned for a write refused because this replica is not
// (or no longer certainly) the leader.
var ErrFenced = errors.New("write refused: this replica does not hold a fresh leader Lease (write fence)")

// FenceCheckedHeader carries, on every write that passed the fence, the
// wall-clock time it passed. A process frozen between that check and the
// write reaching the socket (microseconds, but SIGSTOP can land there) sends
// the write when it resumes, possibly after another replica took the Lease:
// no client-side fence can close that window. The stamp lets a proxy or an
// audit tell such a write, checked before the freeze, from a write the
// fence let through late.
const FenceCheckedHeader = "Converge-Fence-Checked"

// wrap returns rt behind the fence. A write is checked when it reaches the
// transport (after client-side throttling, where writes queue) and again
// when it has its connection, right before it is written; a write caught
// by a closing fence there is cancelled.
func (f *Fence) wrap(rt http.RoundTripper) http.RoundTripper {
	return fencedTransport{f: f, next: rt}
}

type fencedTransport struct {
	f    *Fence
	next http.RoundTripper
}

func (t fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return t.next.RoundTrip(req)
	}
	refused := func() error {
		fencedWrites.Inc()
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrFenced)
	}
	if !t.f.Open() {
		return nil, refused()
	}
	checked := time.Now()
	ctx, cancel := context.WithCancelCause(req.Context())
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		if !t.f.Open() {
			cancel(refused())
		}
	}})
	req = req.Clone(ctx) // a RoundTripper must not change the caller's request
	req.Header.Set(FenceCheckedHeader, checked.UTC().Format(time.RFC3339Nano))
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrFenced) {
			err = cause
		}
		cancel(nil)
		return nil, err
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Config puts cfg's requests behind f (nil: unchanged). Copies of the
// config (impersonating clients) keep the fence.
func Config(cfg *rest.Config, f *Fence) {
	if f == nil {
		return
	}
	prev := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return f.wrap(rt)
	}
}

// fencedLock is the Lease lock that opens the fence on every renewal the
// API server accepted, timed from when it was sent, and closes it on
// release.
type fencedLock struct {
	resourcelock.Interface
	f *Fence
}

func (l fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	if err := l.Interface.Create(ctx, ler); err != nil {
		return err
	}
	l.record(ler, sent)
	return nil
}

func (l fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.Identity() {
		l.f.revoke() // releasing: stop writing first
	}
	sent := time.Now()
	if err := l.Interface.Update(ctx, ler); err != nil {
		return err
	}
	l.record(ler, sent)
	return nil
}

func (l fencedLock) record(ler resourcelock.LeaderElectionRecord, sent time.Time) {
	if ler.HolderIdentity == l.Identity() {
		l.f.Renewed(sent)
	}
}

// NewLeaseLock builds the Lease lock of leader election from cfg (the
// manager's, unfenced) and the fence it drives.
func NewLeaseLock(cfg *rest.Config, namespace, name string, t Timings, f *Fence) (resourcelock.Interface, error) {
	if namespace == "" {
		return nil, errors.New("leader election needs a namespace for its Lease (--leader-election-namespace)")
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	// One hung request must not use up the renew deadline.
	cfg.Timeout = max(t.RenewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	coord, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// host_pid_uuid: the pod name in a cluster; the pid tells processes on
	// one host apart in logs and tests.
	id := fmt.Sprintf("%s_%d_%s", host, os.Getpid(), uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, core, coord,
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, fmt.Errorf("building the leader election lock: %w", err)
	}
	return fencedLock{Interface: lock, f: f}, nil
}

// fencedWrites counts controller writes the fence refused.
var fencedWrites = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "converge_leader_fenced_writes_total",
	Help: "Controller writes refused because this replica did not hold a fresh leader Lease.",
})

func init() { metrics.Registry.MustRegister(fencedWrites) }
