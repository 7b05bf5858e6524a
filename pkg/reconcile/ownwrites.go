package reconcile

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OwnWrites lets a reconcile read its own writes from the shared cache: it
// remembers, for one kind, the resourceVersion of the last write this
// process made to each object, until the cache has shown that version. A
// reconcile that reads an object from the cache asks [OwnWrites.Behind]
// before it acts on what it read; when the cache is still behind the
// controller's own last write, the reconcile looks again shortly instead of
// acting on an object it has already changed (issuing twice, say, from a
// status that does not show the issuance it just recorded).
//
// This replaces an uncached GET per decision (a read from the API server,
// spent on the controller's budget) for the staleness a controller causes
// itself. It says nothing about other writers: a write made by another
// process (a previous leader, a person) reaches the cache with the watch's
// usual delay, as it always did.
//
// Resource versions are compared as integers, as controller-runtime's
// read-your-writes client does (Kubernetes' comparable resource versions,
// k8s.io/apimachinery/pkg/util/resourceversion). A record the cache never
// shows (the object left the cache's selector, the watch was re-listed
// after a delete) is dropped after a TTL, so Behind can never hold a
// reconcile back for longer than that. A nil *OwnWrites records nothing
// and is never behind.
type OwnWrites struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	pending map[types.NamespacedName]ownWrite
	// observed is the highest resourceVersion the cache's events have
	// shown, by namespace ("" for cluster-scoped objects). One informer's
	// watch delivers events in resourceVersion order, so every write at or
	// below it is in the cache. Kept by namespace because a cache limited
	// to several namespaces runs one watch per namespace.
	observed  map[string]int64
	lastSweep time.Time
}

type ownWrite struct {
	rv int64
	at time.Time
}

// DefaultOwnWritesTTL bounds how long a write may stay unseen by the cache
// before it is no longer waited for.
const DefaultOwnWritesTTL = 30 * time.Second

// NewOwnWrites returns an empty record; ttl <= 0 means DefaultOwnWritesTTL.
func NewOwnWrites(ttl time.Duration) *OwnWrites {
	if ttl <= 0 {
		ttl = DefaultOwnWritesTTL
	}
	return &OwnWrites{ttl: ttl, now: time.Now, pending: map[types.NamespacedName]ownWrite{}, observed: map[string]int64{}}
}

// Track registers w on the informer of obj's kind in informers (the
// manager's cache): its events tell how far the cache has come. Without
// it, only a cached copy at or past a write clears that write.
func (w *OwnWrites) Track(ctx context.Context, informers cache.Informers, obj client.Object) error {
	inf, err := informers.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("tracking own writes of %T: %w", obj, err)
	}
	if _, err := inf.AddEventHandler(w); err != nil {
		return fmt.Errorf("tracking own writes of %T: %w", obj, err)
	}
	return nil
}

// Wrote records obj as the API server returned it from a write (Create,
// Update, Patch and their status forms fill in its resourceVersion).
func (w *OwnWrites) Wrote(obj client.Object) {
	if w == nil {
		return
	}
	rv, ok := parseRV(obj.GetResourceVersion())
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if rv <= w.observed[obj.GetNamespace()] {
		return // the cache is already there
	}
	key := client.ObjectKeyFromObject(obj)
	if cur, ok := w.pending[key]; !ok || rv > cur.rv {
		w.pending[key] = ownWrite{rv: rv, at: now}
	}
	if now.Sub(w.lastSweep) > w.ttl {
		w.lastSweep = now
		for k, p := range w.pending {
			if w.doneLocked(k, p, now) {
				delete(w.pending, k)
			}
		}
	}
}

// Behind reports whether cached, the cache's copy of the object named key
// (nil when the cache has none), is older than this process's last write
// to it: the caller should not act on it yet. It is false once the cache
// shows that write or anything after it, and after the TTL.
func (w *OwnWrites) Behind(key types.NamespacedName, cached client.Object) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.pending[key]
	if !ok {
		return false
	}
	if w.doneLocked(key, p, w.now()) {
		delete(w.pending, key)
		return false
	}
	if cached != nil {
		if rv, ok := parseRV(cached.GetResourceVersion()); ok && rv >= p.rv {
			delete(w.pending, key)
			return false
		}
	}
	return true
}

// doneLocked: the cache's events have passed p, or p is older than the TTL.
func (w *OwnWrites) doneLocked(key types.NamespacedName, p ownWrite, now time.Time) bool {
	return p.rv <= w.observed[key.Namespace] || now.Sub(p.at) > w.ttl
}

// Pending is the number of writes the cache has not shown yet (for metrics
// and tests).
func (w *OwnWrites) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	now := w.now()
	for k, p := range w.pending {
		if !w.doneLocked(k, p, now) {
			n++
		}
	}
	return n
}

// seen moves the namespace's observed resourceVersion to obj's.
func (w *OwnWrites) seen(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	rv, ok := parseRV(o.GetResourceVersion())
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if rv > w.observed[o.GetNamespace()] {
		w.observed[o.GetNamespace()] = rv
	}
}

// OnAdd implements toolscache.ResourceEventHandler.
func (w *OwnWrites) OnAdd(obj any, _ bool) { w.seen(obj) }

// OnUpdate implements toolscache.ResourceEventHandler.
func (w *OwnWrites) OnUpdate(_, obj any) { w.seen(obj) }

// OnDelete implements toolscache.ResourceEventHandler.
func (w *OwnWrites) OnDelete(obj any) { w.seen(obj) }

func parseRV(s string) (int64, bool) {
	rv, err := strconv.ParseInt(s, 10, 64)
	return rv, err == nil && rv > 0
}
