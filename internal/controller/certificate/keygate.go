package certificate

import (
	"runtime"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
)

// keyGate shares the CPU that RSA key generation costs (a 4096-bit key
// takes about a second) fairly between namespaces: at most one RSA key of
// a namespace is made at a time, and at most limit in all, so that a
// namespace asking for many large keys holds at most one worker and one
// core, while another namespace's issuance finds a free slot. A
// Certificate that finds no slot waits out of the workers (its reconcile
// ends) and is woken when a slot frees: the first waiter of each namespace
// without a slot, the namespace that waited longest first. ECDSA and Ed25519 keys take
// microseconds and pass without a slot.
type keyGate struct {
	mu     sync.Mutex
	limit  int
	active map[string]int
	// waiting holds, per namespace, the Certificates waiting for a slot in
	// arrival order; order is the namespaces in the order they started to
	// wait (the round-robin of wake-ups).
	waiting map[string][]types.NamespacedName
	order   []string
	// wake receives the Certificates to reconcile again (a channel source
	// of the controller); a full channel drops the wake-up and the waiter's
	// fallback requeue takes over.
	wake chan event.GenericEvent
	// generated counts the gated keys made, per namespace, for tests.
	generated map[string]int
}

// newKeyGate returns a gate with limit slots (at least 2, so that one
// namespace never holds them all).
func newKeyGate(limit int) *keyGate {
	if limit <= 0 {
		limit = runtime.GOMAXPROCS(0)
	}
	return &keyGate{limit: max(limit, 2), active: map[string]int{}, waiting: map[string][]types.NamespacedName{},
		wake: make(chan event.GenericEvent, 1024), generated: map[string]int{}}
}

// gated says whether making a key of k takes a slot.
func gated(k pki.KeySpec) bool { return k.Algorithm == pkiv1alpha1.RSAKeyAlgorithm }

// acquire takes a slot for the Certificate nn when its namespace has none
// and one is free, or records it as waiting and returns false.
func (g *keyGate) acquire(nn types.NamespacedName) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	total := 0
	for _, n := range g.active {
		total += n
	}
	if g.active[nn.Namespace] == 0 && total < g.limit {
		g.dequeue(nn)
		g.active[nn.Namespace]++
		return true
	}
	g.enqueue(nn)
	return false
}

func (g *keyGate) enqueue(nn types.NamespacedName) {
	q := g.waiting[nn.Namespace]
	for _, w := range q {
		if w == nn {
			return
		}
	}
	if len(q) == 0 {
		g.order = append(g.order, nn.Namespace)
	}
	g.waiting[nn.Namespace] = append(q, nn)
}

func (g *keyGate) dequeue(nn types.NamespacedName) {
	q := g.waiting[nn.Namespace]
	for i, w := range q {
		if w == nn {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) > 0 {
		g.waiting[nn.Namespace] = q
		return
	}
	delete(g.waiting, nn.Namespace)
	for i, ns := range g.order {
		if ns == nn.Namespace {
			g.order = append(g.order[:i:i], g.order[i+1:]...)
			break
		}
	}
}

// forget drops a waiter (its Certificate was deleted).
func (g *keyGate) forget(nn types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dequeue(nn)
}

// release frees the slot of nn's namespace and wakes the waiter whose turn
// it is: the first waiter of the namespace that has waited longest (the
// namespace just served goes to the back of the order).
func (g *keyGate) release(nn types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.generated[nn.Namespace]++
	if g.active[nn.Namespace]--; g.active[nn.Namespace] <= 0 {
		delete(g.active, nn.Namespace)
	}
	// The namespace just served waits behind every other one.
	for i, ns := range g.order {
		if ns == nn.Namespace && i < len(g.order)-1 {
			g.order = append(append(g.order[:i:i], g.order[i+1:]...), ns)
			break
		}
	}
	// Wake the first waiter of every namespace without a slot, the one
	// that waited longest first: whichever reconciles first takes the slot,
	// the others wait again.
	for _, ns := range g.order {
		if g.active[ns] == 0 && len(g.waiting[ns]) > 0 {
			w := g.waiting[ns][0]
			obj := &pkiv1alpha1.Certificate{}
			obj.Namespace, obj.Name = w.Namespace, w.Name
			select {
			case g.wake <- event.GenericEvent{Object: obj}:
			default:
			}
		}
	}
}

// Generated returns how many gated keys were made for namespace ns.
func (g *keyGate) Generated(ns string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.generated[ns]
}
