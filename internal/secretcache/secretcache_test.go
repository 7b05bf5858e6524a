package secretcache

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

func secret(name, rv string, size int) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv},
		Data: map[string][]byte{"k": []byte(strings.Repeat("x", size))}}
}

// TestDataStaysWithinItsBound: the LRU keeps at most its byte bound,
// evicts the least recently used first, serves only the resourceVersion it
// holds, returns copies, and never keeps a Secret larger than the bound.
func TestDataStaysWithinItsBound(t *testing.T) {
	g := NewWithT(t)
	d := NewData(3000)
	key := func(i int) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)} }
	for i := range 3 {
		d.put(secret(fmt.Sprint(i), "1", 900))
	}
	g.Expect(d.Len()).To(Equal(3))
	_, ok := d.get(key(0), "1") // 0 is now the most recently used
	g.Expect(ok).To(BeTrue())
	d.put(secret("3", "1", 900))
	g.Expect(d.Bytes()).To(BeNumerically("<=", 3000))
	_, ok = d.get(key(1), "1")
	g.Expect(ok).To(BeFalse(), "the least recently used was kept")
	for _, i := range []int{0, 2, 3} {
		_, ok = d.get(key(i), "1")
		g.Expect(ok).To(BeTrue(), "Secret %d", i)
	}
	_, ok = d.get(key(0), "2")
	g.Expect(ok).To(BeFalse(), "another resourceVersion was served")
	s, _ := d.get(key(0), "1")
	s.Data["k"] = []byte("mutated")
	s, _ = d.get(key(0), "1")
	g.Expect(string(s.Data["k"])).NotTo(Equal("mutated"))
	d.put(secret("huge", "1", 5000))
	_, ok = d.get(types.NamespacedName{Namespace: "ns", Name: "huge"}, "1")
	g.Expect(ok).To(BeFalse())
	g.Expect(d.Bytes()).To(BeNumerically("<=", 3000))
}

// TestTransform: an unlabelled Secret with more than KeepBytes of data
// loses its data, managed fields and kubectl's last-applied-configuration
// and keeps its other metadata and type, stripped in place (no second
// Secret struct per cached object); stripping twice changes nothing; a
// small one and a labelled one lose their managed fields only; other
// objects pass as they are.
func TestTransform(t *testing.T) {
	g := NewWithT(t)
	Transform := NewBudget(-1).Transform
	s := secret("a", "7", KeepBytes)
	s.Type = corev1.SecretTypeTLS
	s.Labels = map[string]string{"app": "x"}
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
	out, err := Transform(s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(BeIdenticalTo(s), "the Secret was copied, not stripped in place")
	st := out.(*corev1.Secret)
	g.Expect(st.Data).To(BeNil())
	g.Expect(st.ManagedFields).To(BeNil())
	g.Expect(st.Labels).To(Equal(map[string]string{"app": "x"}))
	g.Expect(st.ResourceVersion).To(Equal("7"))
	g.Expect(st.Type).To(Equal(corev1.SecretTypeTLS))
	again, err := Transform(st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(BeIdenticalTo(st))
	g.Expect(st.Data).To(BeNil())
	g.Expect(st.ResourceVersion).To(Equal("7"))
	// kubectl apply's copy of the data goes with the data.
	s = secret("a", "8", KeepBytes)
	s.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: `{"data":{"k":"eHh4"}}`, "note": "kept"}
	out, _ = Transform(s)
	g.Expect(out.(*corev1.Secret).Annotations).To(Equal(map[string]string{"note": "kept"}))
	g.Expect(out.(*corev1.Secret).Data).To(BeNil())
	s = secret("a", "9", KeepBytes)
	s.Labels = map[string]string{Label: "true"}
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
	out, _ = Transform(s)
	g.Expect(out).To(BeIdenticalTo(s))
	g.Expect(s.Data).NotTo(BeNil())
	g.Expect(s.ManagedFields).To(BeNil(), "a cached Secret keeps its data, not its managed fields")
	small := secret("b", "1", KeepBytes-1) // plus the key "k": exactly KeepBytes
	out, _ = Transform(small)
	g.Expect(out).To(BeIdenticalTo(small))
	cm := &corev1.ConfigMap{}
	out, _ = Transform(cm)
	g.Expect(out).To(BeIdenticalTo(cm))
}

// TestBudgetBoundsWhatALabelKeeps: the label is a hint, not a right. A
// labelled Secret larger than LabelMaxBytes is stripped (a tenant's
// megabyte blob); labelled and small Secrets are kept only while all kept
// data fits the Budget, first come first kept; an update is counted once (its
// new size replaces the old), a Secret that grows past the bound frees what
// it held, and a deletion (or a relist's tombstone) gives its bytes back.
func TestBudgetBoundsWhatALabelKeeps(t *testing.T) {
	g := NewWithT(t)
	labelled := func(name, rv string, n int) *corev1.Secret {
		s := secret(name, rv, n)
		s.Labels = map[string]string{Label: "true"}
		return s
	}
	kept := func(b *Budget, s *corev1.Secret) bool {
		out, err := b.Transform(s)
		g.Expect(err).NotTo(HaveOccurred())
		return len(out.(*corev1.Secret).Data) > 0
	}
	b := NewBudget(-1)
	g.Expect(kept(b, labelled("blob", "1", 1<<20))).To(BeFalse(), "a labelled 1 MiB Secret was cached whole")
	g.Expect(kept(b, labelled("edge", "1", LabelMaxBytes-1))).To(BeTrue(), "a labelled Secret of LabelMaxBytes was stripped")
	g.Expect(kept(b, labelled("over", "1", LabelMaxBytes))).To(BeFalse(), "a labelled Secret over LabelMaxBytes was cached whole")
	g.Expect(b.Used()).To(Equal(len("ns") + len("edge") + LabelMaxBytes))

	// each Secret below costs 2 ("ns") + 1 (name) + 1 ("k") + 996 = 1000 bytes
	b = NewBudget(2500)
	g.Expect(kept(b, labelled("a", "1", 996))).To(BeTrue())
	g.Expect(kept(b, secret("b", "1", 996))).To(BeTrue(), "a small unlabelled Secret counts and fits")
	g.Expect(kept(b, labelled("c", "1", 996))).To(BeFalse(), "kept past the budget")
	g.Expect(b.Used()).To(Equal(2000))
	g.Expect(kept(b, labelled("a", "2", 996))).To(BeTrue(), "an update of a kept Secret was counted twice")
	g.Expect(b.Used()).To(Equal(2000))
	g.Expect(kept(b, labelled("a", "3", 2000))).To(BeFalse(), "a Secret grown past the budget was kept")
	g.Expect(b.Used()).To(Equal(1000), "the grown Secret's earlier bytes were not freed")
	g.Expect(kept(b, labelled("c", "2", 996))).To(BeTrue(), "room freed by a grown Secret was not reused")
	b.Forget(secret("b", "1", 0))
	g.Expect(b.Used()).To(Equal(1000))
	b.Forget(toolscache.DeletedFinalStateUnknown{Key: "ns/c", Obj: secret("c", "2", 0)})
	g.Expect(b.Used()).To(Equal(0), "a relist tombstone did not free its bytes")
	b.Forget(&corev1.ConfigMap{})
	g.Expect(kept(b, labelled("d", "1", 996))).To(BeTrue())
}
