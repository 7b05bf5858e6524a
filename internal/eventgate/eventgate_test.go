package eventgate

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/converge-dev/converge/internal/apibudget"
)

// TestEventGateQueue: the gate's queue is first in, first out, holds at
// most QueueLength Events, and lets its array go once it drains (an
// idle gate holds nothing).
func TestEventGateQueue(t *testing.T) {
	g := NewWithT(t)
	gate := New(runtime.NewScheme(), apibudget.Manager)
	g.Expect(gate.queue).To(BeNil())
	for i := range QueueLength {
		g.Expect(gate.push(queuedEvent{reason: string(rune('a' + i%26))})).To(BeTrue())
	}
	g.Expect(gate.push(queuedEvent{reason: "full"})).To(BeFalse())
	for i := range QueueLength {
		e, ok := gate.pop()
		g.Expect(ok).To(BeTrue())
		g.Expect(e.reason).To(Equal(string(rune('a' + i%26))))
	}
	_, ok := gate.pop()
	g.Expect(ok).To(BeFalse())
	g.Expect(gate.queue).To(BeNil(), "the drained queue keeps its array")
}
