package sync

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/placement"
)

// TestPrepareUsesTheScopeOfItsOwnCRD: while the API server's discovery does
// not show a kind yet (the window between its CRD being Established and the
// RESTMapper seeing it), an object of that kind is still placed in the
// Sync's namespace when the render's CRD declares it namespaced — so the
// inventory written ahead of the apply never holds it as cluster-scoped.
func TestPrepareUsesTheScopeOfItsOwnCRD(t *testing.T) {
	g := NewWithT(t)
	r := &Reconciler{Mapper: meta.NewDefaultRESTMapper(nil)} // knows no kind at all
	crd := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"spec": map[string]any{"group": "example.com", "scope": "Namespaced", "names": map[string]any{"kind": "Gadget"}}}}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Gadget")
	u.SetName("g")
	sy := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "app"}}
	r.prepare(sy, placement.CRDScopes([]*unstructured.Unstructured{crd, u}), u)
	g.Expect(u.GetNamespace()).To(Equal("tenant"))
	g.Expect(refOf(u).Namespace).To(Equal("tenant"))
}

// TestMisplacedEntriesAreNeverRead: an inventory entry of a namespaced kind
// without a namespace (written by releases before the fix above) is dropped
// without any read — a read would be at cluster scope, forbidden to a
// tenant, and would hold the prune for good. The nil client proves no read
// is made: a read would panic.
func TestMisplacedEntriesAreNeverRead(t *testing.T) {
	g := NewWithT(t)
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}, meta.RESTScopeNamespace)
	r := &Reconciler{Mapper: m}
	ref := gitopsv1alpha1.ObjectRef{Group: "example.com", Version: "v1", Kind: "Gadget", Name: "g"}
	out, err := r.existing(t.Context(), nil, []gitopsv1alpha1.ObjectRef{ref})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(BeEmpty())
	deleted, err := r.pruneOne(t.Context(), nil, &gitopsv1alpha1.Sync{}, ref)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(deleted).To(BeFalse())
}
