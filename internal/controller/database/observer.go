package database

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
)

var (
	observersGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_database_observers",
		Help: "Running drift observers, one per database instance (namespace/kind/name) with Databases on it; the leader runs them.",
	}, []string{"instance"})
	snapshotsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_database_snapshots_total",
		Help: "Snapshots of a database server taken by its observer (one query on PostgreSQL, two on MariaDB), by result (ok, failed).",
	}, []string{"instance", "result"})
	driftDetected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_database_drift_detected_total",
		Help: "Ready Databases a snapshot found drifted from their spec (each is queued for a full reconcile, which corrects it).",
	}, []string{"instance"})
)

func init() { metrics.Registry.MustRegister(observersGauge, snapshotsTotal, driftDetected) }

// observerHub runs one observer per database instance that Databases refer
// to. Each observer takes one snapshot of its server per interval and
// queues, through a channel source, only the Ready Databases the snapshot
// shows drifted; the reconcile does all the writing. Observers run on the
// leader only (the hub is a leader-election runnable) and stop when their
// instance, or the last Database on it, is gone.
type observerHub struct {
	r        *Reconciler
	interval time.Duration
	events   chan event.GenericEvent

	mu      sync.Mutex
	ctx     context.Context // set by Start; nil until this replica leads
	running map[string]*observer
}

// observer watches one instance.
type observer struct {
	key       string // namespace/group/kind/name
	namespace string
	ref       sqlv1alpha1.InstanceReference
	label     string // namespace/kind/name, for metrics

	mu      sync.Mutex
	admin   sqlengine.Config
	started bool
	// remembered counts remember calls (under the hub's lock): an observer
	// that found nothing to observe stops only if no reconcile remembered
	// its instance meanwhile.
	remembered int
	failing    bool
}

func newObserverHub(r *Reconciler, interval time.Duration) *observerHub {
	return &observerHub{r: r, interval: interval, events: make(chan event.GenericEvent, 1024), running: map[string]*observer{}}
}

// Start runs until ctx ends (the manager stops or this replica loses the
// lease), then stops every observer with it.
func (h *observerHub) Start(ctx context.Context) error {
	h.mu.Lock()
	h.ctx = ctx
	for _, o := range h.running {
		h.launch(o)
	}
	h.mu.Unlock()
	<-ctx.Done()
	return nil
}

// remember records the admin credentials of a Database's instance, which a
// reconcile just resolved and used, and starts the instance's observer if
// none runs.
func (h *observerHub) remember(d *sqlv1alpha1.Database, admin sqlengine.Config) {
	key := d.Namespace + "/" + instanceKey(d.Spec.InstanceRef)
	h.mu.Lock()
	defer h.mu.Unlock()
	o, ok := h.running[key]
	if !ok {
		o = &observer{key: key, namespace: d.Namespace, ref: d.Spec.InstanceRef,
			label: d.Namespace + "/" + d.Spec.InstanceRef.Kind + "/" + d.Spec.InstanceRef.Name}
		h.running[key] = o
	}
	o.mu.Lock()
	o.admin = admin
	o.remembered++
	o.mu.Unlock()
	if h.ctx != nil {
		h.launch(o)
	}
}

// launch starts o's goroutine once; h.mu is held.
func (h *observerHub) launch(o *observer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.started {
		return
	}
	o.started = true
	go h.run(h.ctx, o)
}

func (h *observerHub) run(ctx context.Context, o *observer) {
	observersGauge.WithLabelValues(o.label).Set(1)
	defer func() {
		observersGauge.DeleteLabelValues(o.label)
		snapshotsTotal.DeletePartialMatch(prometheus.Labels{"instance": o.label})
		driftDetected.DeleteLabelValues(o.label)
	}()
	log := ctrl.LoggerFrom(ctx).WithName("observer").WithValues("instance", o.label)
	// A random phase spreads the observers of many instances over the
	// interval.
	t := time.NewTimer(time.Duration(rand.Int64N(int64(h.interval))) + time.Millisecond) //nolint:gosec // jitter, not a secret
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seen := o.rememberedCount()
		if !h.observe(ctx, o, log.V(1).Info) && h.stop(o, seen) {
			log.V(1).Info("Stopping the observer: the instance or its last Database is gone")
			return
		}
		t.Reset(h.interval)
	}
}

func (o *observer) rememberedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.remembered
}

// stop removes o unless a reconcile remembered its instance since seen.
func (h *observerHub) stop(o *observer, seen int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o.rememberedCount() != seen {
		return false
	}
	delete(h.running, o.key)
	return true
}

// observe takes one snapshot and queues the drifted Databases. It returns
// false when the observer should stop.
func (h *observerHub) observe(ctx context.Context, o *observer, logf func(string, ...any)) bool {
	gv, _ := schema.ParseGroupVersion(o.ref.APIVersion)
	inst := &unstructured.Unstructured{}
	inst.SetGroupVersionKind(gv.WithKind(o.ref.Kind))
	// From the informer r.instances started (not the API server).
	if err := h.r.mgr.GetCache().Get(ctx, types.NamespacedName{Namespace: o.namespace, Name: o.ref.Name}, inst); apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return false
	}
	list := &sqlv1alpha1.DatabaseList{}
	if err := h.r.List(ctx, list, client.InNamespace(o.namespace), client.MatchingFields{instanceIndex: instanceKey(o.ref)}); err != nil {
		logf("Listing the instance's Databases failed; observing again next interval", "error", err.Error())
		return true
	}
	if len(list.Items) == 0 {
		return false
	}
	var established []*sqlv1alpha1.Database
	for i := range list.Items {
		if d := &list.Items[i]; isEstablished(d) {
			established = append(established, d)
		}
	}
	if len(established) == 0 {
		return true
	}
	o.mu.Lock()
	admin := o.admin
	o.mu.Unlock()
	var snap *sqlengine.Snapshot
	srv, err := h.r.Engines.Admin(admin)
	if err == nil {
		snap, err = srv.Snapshot(ctx)
	}
	if err != nil {
		snapshotsTotal.WithLabelValues(o.label, "failed").Inc()
		logf("Snapshot failed", "error", err.Error())
		// Once per outage, every Database on the server reconciles, to
		// report it (InstanceUnavailable) and retry with backoff.
		if !o.failing {
			o.failing = true
			for _, d := range established {
				h.queue(ctx, d)
			}
		}
		return true
	}
	o.failing = false
	snapshotsTotal.WithLabelValues(o.label, "ok").Inc()
	for _, d := range established {
		dbName, owner := resolveNames(d)
		if drift := snap.Drift(sqlengine.Spec{Name: dbName, Owner: owner, Claim: claimOf(d)}); len(drift) > 0 {
			driftDetected.WithLabelValues(o.label).Inc()
			logf("Drift found; queueing a reconcile", "Database", d.Name, "drift", drift)
			h.queue(ctx, d)
		}
	}
	return true
}

func (h *observerHub) queue(ctx context.Context, d *sqlv1alpha1.Database) {
	select {
	case h.events <- event.GenericEvent{Object: d}:
	case <-ctx.Done():
	}
}

// isEstablished: Ready for its current spec and not being deleted. Anything
// else is already being reconciled (or waits for the user); a snapshot says
// nothing new about it.
func isEstablished(d *sqlv1alpha1.Database) bool {
	return d.DeletionTimestamp.IsZero() && d.Status.ObservedGeneration == d.Generation && d.Status.AtProvider.Exists &&
		meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
}

// resyncAfter is the resync interval with ±5 % jitter, so Databases created
// together do not all reconcile in the same second forever.
func resyncAfter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.95 + 0.1*rand.Float64())) //nolint:gosec // jitter, not a secret
}
