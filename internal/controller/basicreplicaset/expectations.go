package basicreplicaset

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// expectationsTTL bounds how long unobserved expectations block scaling, in
// case a watch event is lost (kube-controller-manager uses the same 5 minutes).
const expectationsTTL = 5 * time.Minute

// expectations remember the Pod creations and deletions a BasicReplicaSet
// asked for and has not yet seen in its cache. While any are pending the
// controller does not scale, so a cache that lags behind its own writes can
// never make it create (or delete) a Pod twice. Creations are counted;
// deletions are tracked by Pod UID, so that seeing the deletion mark and then
// the removal of the same Pod counts once.
type expectations struct {
	mu    sync.Mutex
	byKey map[types.NamespacedName]*expectation
}

type expectation struct {
	adds      int
	dels      map[types.UID]struct{}
	timestamp time.Time
}

func newExpectations() *expectations {
	return &expectations{byKey: map[types.NamespacedName]*expectation{}}
}

// expectCreations records that n creations are in flight.
func (e *expectations) expectCreations(key types.NamespacedName, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byKey[key] = &expectation{adds: n, timestamp: time.Now()}
}

// expectDeletions records the Pods whose deletion is in flight.
func (e *expectations) expectDeletions(key types.NamespacedName, uids []types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := &expectation{dels: map[types.UID]struct{}{}, timestamp: time.Now()}
	for _, u := range uids {
		x.dels[u] = struct{}{}
	}
	e.byKey[key] = x
}

// creationsObserved lowers the pending creations; also used to give back
// the creations that failed.
func (e *expectations) creationsObserved(key types.NamespacedName, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.byKey[key]; ok {
		x.adds -= n
	}
}

// deletionObserved marks one Pod's deletion as seen (or as not coming).
func (e *expectations) deletionObserved(key types.NamespacedName, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.byKey[key]; ok {
		delete(x.dels, uid)
	}
}

// satisfied reports whether nothing is pending (or it waited too long).
func (e *expectations) satisfied(key types.NamespacedName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.byKey[key]
	if !ok {
		return true
	}
	return (x.adds <= 0 && len(x.dels) == 0) || time.Since(x.timestamp) > expectationsTTL
}

// forget drops the entry of a deleted BasicReplicaSet.
func (e *expectations) forget(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byKey, key)
}
