package certificate

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

// TestKeyGate: one RSA key per namespace at a time, at most limit in all;
// a release wakes the first waiter of each namespace without a slot, the
// namespace that waited longest first.
func TestKeyGate(t *testing.T) {
	g := NewWithT(t)
	gate := newKeyGate(2)
	a := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "a", Name: n} }
	b := types.NamespacedName{Namespace: "b", Name: "x"}
	c := types.NamespacedName{Namespace: "c", Name: "x"}
	g.Expect(gate.acquire(a("1"))).To(BeTrue())
	g.Expect(gate.acquire(a("2"))).To(BeFalse(), "one key of a namespace at a time")
	g.Expect(gate.acquire(a("3"))).To(BeFalse())
	g.Expect(gate.acquire(b)).To(BeTrue(), "another namespace finds a slot")
	g.Expect(gate.acquire(c)).To(BeFalse(), "at most limit in all")
	g.Expect(gate.wake).To(BeEmpty())
	gate.release(a("1"))
	var woken []types.NamespacedName
	for len(gate.wake) > 0 {
		e := <-gate.wake
		woken = append(woken, types.NamespacedName{Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()})
	}
	g.Expect(woken).To(Equal([]types.NamespacedName{c, a("2")}), "the namespace just served goes last")
	g.Expect(gate.acquire(c)).To(BeTrue())
	g.Expect(gate.acquire(a("2"))).To(BeFalse(), "both slots taken")
	gate.forget(a("2"))
	gate.forget(a("3"))
	gate.release(b)
	g.Expect(gate.wake).To(BeEmpty(), "nobody waits")
	g.Expect(gate.Generated("a")).To(Equal(1))
	g.Expect(newKeyGate(1).limit).To(Equal(2), "never a single slot one namespace could hold")
}
