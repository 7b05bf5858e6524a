package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestPruneFalseNeverDeletesRemovedObjects: with prune: false, an object
// removed from git leaves the inventory and stays in the cluster. The
// check runs after the Sync applied the revision without it, so the prune
// that would have deleted it has run.
func TestPruneFalseNeverDeletesRemovedObjects(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	repo, h1, gr := setupRepo(t, ns, map[string]string{
		"app/a.yaml": configMap("a", nil),
		"app/b.yaml": configMap("b", nil),
	})
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "keep", "app", "app", false))).To(Succeed())
	s := waitApplied(t, g, ns, "keep", h1)
	g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/a", "ConfigMap/b"))

	h2 := repo.Delete(t, "remove b", "app/b.yaml")
	requestReconcile(t, gr)
	s = waitApplied(t, g, ns, "keep", h2)
	g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/a"), "b is orphaned: no longer the Sync's")
	_, err := getCM(t, ns, "b")
	g.Expect(err).NotTo(HaveOccurred(), "prune: false deleted an object removed from git")
}

// TestDeletedSyncHeldByAnotherFinalizer: once a deleted Sync's own
// finalizer is gone and another one still holds the object, its
// reconciles succeed and never put the finalizer back (the API refuses new
// finalizers on an object being deleted).
func TestDeletedSyncHeldByAnotherFinalizer(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	_, h1, _ := setupRepo(t, ns, map[string]string{"app/a.yaml": configMap("a", nil)})
	sy := newSync(ns, "held", "app", "app", true)
	sy.Finalizers = []string{"example.com/hold"}
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	waitApplied(t, g, ns, "held", h1)
	g.Expect(env.Client.Delete(t.Context(), sy)).To(Succeed())
	expectGone(t, g, ns, "a")
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(getSync(g, t, ns, "held").Finalizers).To(Equal([]string{"example.com/hold"}))
	}).Should(Succeed())

	cur := getSync(g, t, ns, "held")
	requestReconcile(t, cur)
	cur = getSync(g, t, ns, "held")
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(getSync(g, t, ns, "held").Status.LastHandledReconcileAt).To(Equal(cur.Annotations[gitopsv1alpha1.ReconcileRequestAnnotation]),
			"the deleted Sync's reconcile failed")
	}).Should(Succeed())
	g.Expect(getSync(g, t, ns, "held").Finalizers).To(Equal([]string{"example.com/hold"}))

	cur = getSync(g, t, ns, "held")
	base := cur.DeepCopy()
	cur.Finalizers = nil
	g.Expect(env.Client.Patch(t.Context(), cur, client.MergeFrom(base))).To(Succeed())
}
