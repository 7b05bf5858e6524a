package sync

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

func objs(n int) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, n)
	for i := range out {
		out[i] = &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "metadata": map[string]any{"name": fmt.Sprint(i)}}}
	}
	return out
}

// TestRenderCacheStaysWithinItsBudget: the renders kept across Syncs never
// exceed the bound, the least recently used go first, a render larger than
// the bound is still kept while it is the newest, and a render made for
// another input is a miss.
func TestRenderCacheStaysWithinItsBudget(t *testing.T) {
	g := NewWithT(t)
	c := newRenderCache(100)
	key := func(i int) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)} }
	for i := range 5 {
		c.put(key(i), "rev1", objs(30))
		g.Expect(c.objects()).To(BeNumerically("<=", 100))
	}
	// 5 x 30 > 100: only the three newest stay.
	for i, want := range []bool{false, false, true, true, true} {
		_, ok := c.get(key(i), "rev1")
		g.Expect(ok).To(Equal(want), "Sync %d", i)
	}
	// Using Sync 2 makes Sync 3 the least recently used.
	_, _ = c.get(key(2), "rev1")
	c.put(key(5), "rev1", objs(30))
	_, ok := c.get(key(3), "rev1")
	g.Expect(ok).To(BeFalse())
	_, ok = c.get(key(2), "rev1")
	g.Expect(ok).To(BeTrue())
	_, ok = c.get(key(2), "rev2")
	g.Expect(ok).To(BeFalse(), "another revision is a miss")

	c.put(key(9), "rev1", objs(250))
	got, ok := c.get(key(9), "rev1")
	g.Expect(ok).To(BeTrue(), "the newest render is kept even beyond the bound")
	g.Expect(got).To(HaveLen(250))
	g.Expect(c.objects()).To(Equal(250))
	c.drop(key(9))
	g.Expect(c.objects()).To(BeZero())
}

// TestDriftCacheKeepsOnlyWhatItReads: the drift cache's transform keeps the
// fields lookups and the handler read, digests the field sets, and shares
// one label map among the objects of a Sync.
func TestDriftCacheKeepsOnlyWhatItReads(t *testing.T) {
	g := NewWithT(t)
	now := metav1.Now()
	mk := func(name string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "team-a", ResourceVersion: "42", UID: "u-" + types.UID(name),
			Labels:      map[string]string{gitopsv1alpha1.SyncNameLabel: "app", gitopsv1alpha1.SyncNamespaceLabel: "team-a", "other": "x"},
			Annotations: map[string]string{"big": "annotation"}, Finalizers: []string{"f"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply, Time: &now,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:key":{}}}`)}},
		}}
	}
	a, err := compactManagedFields(mk("a"))
	g.Expect(err).NotTo(HaveOccurred())
	b, _ := compactManagedFields(mk("b"))
	ma, mb := a.(*metav1.PartialObjectMetadata), b.(*metav1.PartialObjectMetadata)
	g.Expect(ma.Name).To(Equal("a"))
	g.Expect(ma.Namespace).To(Equal("team-a"))
	g.Expect(ma.ResourceVersion).To(Equal("42"))
	g.Expect(ma.UID).To(BeEmpty())
	g.Expect(ma.Annotations).To(BeNil())
	g.Expect(ma.Finalizers).To(BeNil())
	g.Expect(ma.Labels).To(Equal(map[string]string{gitopsv1alpha1.SyncNameLabel: "app", gitopsv1alpha1.SyncNamespaceLabel: "team-a"}))
	g.Expect(fmt.Sprintf("%p", ma.Labels)).To(Equal(fmt.Sprintf("%p", mb.Labels)), "one label map per Sync")
	g.Expect(ma.ManagedFields).To(HaveLen(1))
	g.Expect(ma.ManagedFields[0].Manager).To(Equal(FieldManager))
	g.Expect(ma.ManagedFields[0].FieldsV1.GetRawBytes()).To(HaveLen(18), "a digest, not the field set")
	g.Expect(fieldsEqual(ma.ManagedFields[0].FieldsV1, mb.ManagedFields[0].FieldsV1)).To(BeTrue())
}
