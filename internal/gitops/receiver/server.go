package receiver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// Options configure the receiver's listener.
type Options struct {
	// BindAddress is where the receiver listens, plain HTTP (terminate TLS in
	// front of it, as for Flux's receiver); "" or "0" disables the receiver.
	BindAddress string
	// Rate is how many requests per second the receiver accepts from all
	// sources together, with bursts of Burst.
	Rate  float64
	Burst int
	// SourceRate is how many requests per second one source (client IP)
	// gets, with bursts of SourceBurst. Behind a proxy every request has the
	// proxy's address; headers such as X-Forwarded-For are not trusted.
	SourceRate  float64
	SourceBurst int
	// ReadTimeout bounds reading a request, headers and body; the headers
	// alone get at most 5 s. WriteTimeout is the same.
	ReadTimeout time.Duration
}

// DefaultOptions are the defaults of `converge run`.
func DefaultOptions() Options {
	return Options{BindAddress: ":9292", Rate: 20, Burst: 40, SourceRate: 2, SourceBurst: 10, ReadTimeout: 10 * time.Second}
}

// Enabled reports whether a bind address is set.
func (o Options) Enabled() bool { return o.BindAddress != "" && o.BindAddress != "0" }

// maxSources bounds the per-source limiters kept in memory.
const maxSources = 10000

// Server serves a Handler on its own listener, behind the rate limits. It is
// a manager Runnable that runs on every replica (no leader election) once the
// caches have synced.
type Server struct {
	// Options configure the listener and the limits.
	Options Options
	// Handler answers the requests the limits let through.
	Handler http.Handler
	// Now is the clock of the rate limits; defaults to time.Now.
	Now func() time.Time

	mu       sync.Mutex
	addr     net.Addr
	global   *rate.Limiter
	sources  map[string]*rate.Limiter
	initOnce sync.Once
}

var _ manager.LeaderElectionRunnable = &Server{}

// Setup adds a Server for o to mgr, with a Handler reading from the manager's
// cache, and a readiness check named "receiver". The GitRepository and
// Secret informers are registered here, so that they start with the manager
// and no request can start one.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) (*Server, error) {
	for _, obj := range []client.Object{&gitopsv1alpha1.GitRepository{}, &corev1.Secret{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("registering the receiver's %T informer: %w", obj, err)
		}
	}
	s := &Server{Options: o, Handler: &Handler{Client: mgr.GetClient(), Reader: mgr.GetCache()}}
	if err := mgr.Add(s); err != nil {
		return nil, fmt.Errorf("adding the receiver: %w", err)
	}
	if err := mgr.AddReadyzCheck("receiver", s.StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding the receiver's readiness check: %w", err)
	}
	return s, nil
}

// NeedLeaderElection is false: every replica answers webhooks.
func (s *Server) NeedLeaderElection() bool { return false }

// Addr is the address the server listens on, nil before it does.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// StartedChecker fails until the server listens.
func (s *Server) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		if s.Addr() == nil {
			return errors.New("the receiver is not listening yet")
		}
		return nil
	}
}

// Start listens and serves until ctx ends, then shuts down gracefully.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Options.BindAddress)
	if err != nil {
		return fmt.Errorf("receiver: listening on %s: %w", s.Options.BindAddress, err)
	}
	readTimeout := s.Options.ReadTimeout
	if readTimeout <= 0 {
		readTimeout = DefaultOptions().ReadTimeout
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: min(readTimeout, 5*time.Second),
		ReadTimeout:       readTimeout,
		WriteTimeout:      readTimeout,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	ctrl.LoggerFrom(ctx).Info("Serving push webhooks", "address", ln.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("receiver: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("receiver: shutting down: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("receiver: %w", err)
	}
	return nil
}

// ServeHTTP applies the rate limits, then the Handler. A refused request
// gets 429 with Retry-After, before its body is read.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	source, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		source = r.RemoteAddr
	}
	if wait, ok := s.allow(source); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(wait, time.Second).Seconds()))))
		ctrl.LoggerFrom(r.Context()).V(1).Info("Refusing webhook over the rate limit", "source", source)
		http.Error(w, "too many requests", http.StatusTooManyRequests)
		return
	}
	s.Handler.ServeHTTP(w, r)
}

// allow takes a token from source's limiter and from the global one, or
// says how long to wait.
func (s *Server) allow(source string) (time.Duration, bool) {
	s.initOnce.Do(func() {
		s.global = rate.NewLimiter(rate.Limit(s.Options.Rate), s.Options.Burst)
		s.sources = map[string]*rate.Limiter{}
	})
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.sources[source]
	if l == nil {
		if len(s.sources) >= maxSources {
			s.pruneSources(now)
		}
		l = rate.NewLimiter(rate.Limit(s.Options.SourceRate), s.Options.SourceBurst)
		s.sources[source] = l
	}
	if !l.AllowN(now, 1) {
		return delay(l, now), false
	}
	if !s.global.AllowN(now, 1) {
		return delay(s.global, now), false
	}
	return 0, true
}

// pruneSources forgets the sources whose bucket is full again (they would
// get a fresh limiter anyway); if none is, it forgets all, leaving the global
// limit to hold. Called with s.mu held.
func (s *Server) pruneSources(now time.Time) {
	for k, l := range s.sources {
		if l.TokensAt(now) >= float64(l.Burst()) {
			delete(s.sources, k)
		}
	}
	if len(s.sources) >= maxSources {
		clear(s.sources)
	}
}

// delay is how long until l has a token again.
func delay(l *rate.Limiter, now time.Time) time.Duration {
	r := l.ReserveN(now, 1)
	if !r.OK() {
		return time.Minute
	}
	d := r.DelayFrom(now)
	r.CancelAt(now)
	return d
}
