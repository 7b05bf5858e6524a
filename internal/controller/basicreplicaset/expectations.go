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
// never make it create (or delete) a Pod twice.
type expectations struct {
	mu    sync.Mutex
	byKey map[types.NamespacedName]*expectation
}

type expectation struct {
	adds, dels int
	timestamp  time.Time
}

func newExpectations() *expectations {
	return &expectations{byKey: map[types.NamespacedName]*expectation{}}
}

// expect records that adds creations and dels deletions are in flight.
func (e *expectations) expect(key types.NamespacedName, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byKey[key] = &expectation{adds: adds, dels: dels, timestamp: time.Now()}
}

// observe lowers the pending counts as the cache reports them; it is also
// used to give back the creations or deletions that failed.
func (e *expectations) observe(key types.NamespacedName, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.byKey[key]; ok {
		x.adds -= adds
		x.dels -= dels
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
	return (x.adds <= 0 && x.dels <= 0) || time.Since(x.timestamp) > expectationsTTL
}

// forget drops the entry of a deleted BasicReplicaSet.
func (e *expectations) forget(key types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byKey, key)
}

func scopeKey(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}
