// Package eventgate stands between the controllers' event recorders and
// client-go's, and hands Events on no faster than the manager's budget
// sends them, from one bounded queue instead of a goroutine per Event.
// internal/setup puts every controller's recorder behind one Gate.
package eventgate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/converge-dev/converge/internal/apibudget"
)

// QueueLength bounds the Events waiting to be handed to client-go's
// recorder; an Event emitted while the queue is full is dropped (and
// counted in DroppedEvents), as client-go's core/v1 recorder drops Events
// beyond its queue of 1000.
const QueueLength = 4096

// Gate stands between the controllers' event recorders and
// controller-runtime's (client-go's events.k8s.io recorder), and hands
// Events on no faster than the recorder's client sends them (the manager's
// budget). client-go starts one goroutine per Event, which waits for the
// client's rate limiter: a burst of Events faster than the budget (three
// per issuance, 1000 issuances in 100 s on a budget of 20 QPS) parked up
// to about a thousand goroutines at a time, each with its own stack, and
// the Go runtime kept what they used for minutes: 122 MiB as read against
// 115 with the gate (bench/README.md, "Memory of the manager,
// certificates, 2026-11-27"). Queued here, an Event is its references,
// reason and formatted note: a few hundred bytes, in a queue that grows
// with the backlog and is let go when it drains.
//
// What reaches the API server is unchanged: the same Event objects, in
// order, with client-go's series aggregation of repeated Events; only its
// eventTime is when the gate hands it on, at most the queue's length
// divided by the budget after it was emitted.
type Gate struct {
	scheme  *runtime.Scheme
	limiter flowcontrol.RateLimiter // nil: unlimited
	log     logr.Logger
	dropped atomic.Int64

	mu    sync.Mutex
	queue []queuedEvent // grows with the backlog: an idle gate holds nothing
	wake  chan struct{} // one pending wake-up for Start
}

// queuedEvent is one Eventf call, its objects already turned into
// references (the caller may change them once Eventf returns).
type queuedEvent struct {
	next                  recorder.EventRecorder
	regarding             *corev1.ObjectReference
	related               *corev1.ObjectReference
	annotations           map[string]string
	eventtype, reason     string
	action, note          string
	annotated, hasRelated bool
}

// New returns a gate that hands Events on within budget b (the manager's:
// its recorder sends with the manager's clients).
func New(scheme *runtime.Scheme, b apibudget.Budget) *Gate {
	g := &Gate{scheme: scheme, wake: make(chan struct{}, 1), log: ctrl.Log.WithName("events")}
	if !b.Unlimited() {
		g.limiter = flowcontrol.NewTokenBucketRateLimiter(b.QPS, b.Burst)
	}
	return g
}

// Start hands queued Events on until ctx ends (a manager.Runnable).
func (g *Gate) Start(ctx context.Context) error {
	for {
		e, ok := g.pop()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-g.wake:
				continue
			}
		}
		if g.limiter != nil {
			if err := g.limiter.Wait(ctx); err != nil {
				return nil //nolint:nilerr // the manager is stopping
			}
		}
		e.send()
	}
}

// pop takes the oldest queued Event.
func (g *Gate) pop() (queuedEvent, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		return queuedEvent{}, false
	}
	e := g.queue[0]
	g.queue[0] = queuedEvent{}
	g.queue = g.queue[1:]
	if len(g.queue) == 0 {
		g.queue = nil // the backlog is gone: let its array go too
	}
	return e, true
}

// push queues e unless the queue is full.
func (g *Gate) push(e queuedEvent) bool {
	g.mu.Lock()
	full := len(g.queue) >= QueueLength
	if !full {
		g.queue = append(g.queue, e)
	}
	g.mu.Unlock()
	if !full {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
	return !full
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: a standby's
// controllers may emit Events too.
func (g *Gate) NeedLeaderElection() bool { return false }

// DroppedEvents is the number of Events dropped because the queue was full.
func (g *Gate) DroppedEvents() int64 { return g.dropped.Load() }

// Recorder returns the gated recorder in front of next.
func (g *Gate) Recorder(next recorder.EventRecorder) recorder.EventRecorder {
	return &gatedRecorder{gate: g, next: next}
}

func (e queuedEvent) send() {
	var related runtime.Object
	if e.hasRelated {
		related = e.related
	}
	if e.annotated {
		e.next.AnnotatedEventf(e.regarding, related, e.annotations, e.eventtype, e.reason, e.action, "%s", e.note)
		return
	}
	e.next.Eventf(e.regarding, related, e.eventtype, e.reason, e.action, "%s", e.note)
}

type gatedRecorder struct {
	gate *Gate
	next recorder.EventRecorder
}

// Eventf implements events.EventRecorder.
func (r *gatedRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.enqueue(regarding, related, nil, false, eventtype, reason, action, note, args...)
}

// AnnotatedEventf implements events.AnnotatedEventRecorder.
func (r *gatedRecorder) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	r.enqueue(regarding, related, annotations, true, eventtype, reason, action, note, args...)
}

func (r *gatedRecorder) enqueue(regarding, related runtime.Object, annotations map[string]string, annotated bool, eventtype, reason, action, note string, args ...any) {
	g := r.gate
	ref, err := reference.GetReference(g.scheme, regarding)
	if err != nil {
		// client-go logs and drops it: let it say why.
		if annotated {
			r.next.AnnotatedEventf(regarding, related, annotations, eventtype, reason, action, note, args...)
		} else {
			r.next.Eventf(regarding, related, eventtype, reason, action, note, args...)
		}
		return
	}
	e := queuedEvent{next: r.next, regarding: ref, annotations: annotations, annotated: annotated,
		eventtype: eventtype, reason: reason, action: action, note: fmt.Sprintf(note, args...)}
	if related != nil {
		// As client-go: a related object that cannot be referenced is
		// left out.
		if rel, err := reference.GetReference(g.scheme, related); err == nil {
			e.related, e.hasRelated = rel, true
		}
	}
	if !g.push(e) {
		if n := g.dropped.Add(1); n == 1 || n%1000 == 0 {
			g.log.Info("Dropping Events: the queue is full", "queue", QueueLength, "dropped", n, "reason", reason)
		}
	}
}
