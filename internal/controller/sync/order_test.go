package sync

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDifferingFirst: a replica that just won the Lease has no records; of
// the objects in render order, those that probably differ (missing from the
// drift cache, last written by another field manager, or recorded with
// another state) go first, the rest keep their order and are still all
// applied.
func TestDifferingFirst(t *testing.T) {
	g := NewWithT(t)
	meta := func(rv string, managers ...string) *metav1.PartialObjectMetadata {
		m := &metav1.PartialObjectMetadata{}
		m.ResourceVersion = rv
		for _, mgr := range managers {
			m.ManagedFields = append(m.ManagedFields, metav1.ManagedFieldsEntry{Manager: mgr, Operation: metav1.ManagedFieldsOperationApply,
				Time: &metav1.Time{Time: time.Unix(1, 0)}})
		}
		return m
	}
	p := func(name, hash string, cached *metav1.PartialObjectMetadata) *planned {
		return &planned{k: objKey{Kind: "ConfigMap", Namespace: "ns", Name: name}, hash: digestOf(hash), cached: cached, inCache: cached != nil}
	}
	ps := []*planned{
		p("unchanged-1", "h", meta("1", FieldManager)),
		p("edited", "h", meta("2", FieldManager, "kubectl-edit")),
		p("unchanged-2", "h", meta("3", FieldManager)),
		p("deleted", "h", nil),
		p("recorded-other-state", "new", meta("4", FieldManager)),
		p("recorded-same", "h", meta("5", FieldManager)),
		p("status-by-others", "h", func() *metav1.PartialObjectMetadata {
			m := meta("6", FieldManager)
			m.ManagedFields = append(m.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubelet", Subresource: "status"})
			return m
		}()),
	}
	st := newSyncState()
	st.set(ps[4].k, record{hash: digestOf("old"), rv: "4"})
	st.set(ps[5].k, record{hash: digestOf("h"), rv: "5"})
	var order []string
	for _, q := range differingFirst(st, ps) {
		order = append(order, q.k.Name)
	}
	g.Expect(order).To(Equal([]string{"edited", "deleted", "recorded-other-state",
		"unchanged-1", "unchanged-2", "recorded-same", "status-by-others"}))
}

// digestOf is a test digest named by a short string.
func digestOf(s string) digest {
	var d digest
	copy(d[:], s)
	return d
}
