package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestCreateUpdateDeleteAcrossCommits: objects follow git; unchanged objects
// are not written (resourceVersion stays); removed objects are pruned.
func TestCreateUpdateDeleteAcrossCommits(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	repo, h1, gr := setupRepo(t, ns, map[string]string{
		"deploy/a.yaml":     configMap("a", map[string]string{"v": "1"}),
		"deploy/sub/b.yaml": configMap("b", map[string]string{"v": "1"}) + "---\n" + configMap("keep", map[string]string{"v": "1"}),
		"other/x.yaml":      configMap("x", nil),
	})
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "app", "deploy", true))).To(Succeed())

	s := waitApplied(t, g, ns, "app", h1)
	g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/a", "ConfigMap/b", "ConfigMap/keep"))
	expectCM(t, g, ns, "a", map[string]string{"v": "1"})
	cm, err := getCM(t, ns, "a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Labels).To(HaveKeyWithValue(gitopsv1alpha1.SyncNameLabel, "app"))
	keep, err := getCM(t, ns, "keep")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = getCM(t, ns, "x")
	g.Expect(err).To(HaveOccurred(), "only spec.path is applied")

	// Update a, remove b, add c.
	repo.Delete(t, "remove b", "deploy/sub/b.yaml")
	h2 := repo.Commit(t, "update", map[string]string{
		"deploy/a.yaml":        configMap("a", map[string]string{"v": "2"}),
		"deploy/sub/keep.yaml": configMap("keep", map[string]string{"v": "1"}),
		"deploy/c.json":        `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"v":"1"}}`,
	})
	requestReconcile(t, gr)
	s = waitApplied(t, g, ns, "app", h2)
	g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/a", "ConfigMap/c", "ConfigMap/keep"))
	expectCM(t, g, ns, "a", map[string]string{"v": "2"})
	expectCM(t, g, ns, "c", map[string]string{"v": "1"})
	expectGone(t, g, ns, "b")
	g.Expect(s.Status.LastApplySummary).To(ContainSubstring("1 deleted"))

	// "keep" moved files but did not change: never written.
	keep2, err := getCM(t, ns, "keep")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keep2.ResourceVersion).To(Equal(keep.ResourceVersion), "an unchanged object is not written")

	// A forced reconcile of the same revision writes nothing.
	a, _ := getCM(t, ns, "a")
	requestReconcile(t, s)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(getSync(g, t, ns, "app").Status.LastHandledReconcileAt).To(Equal(s.Annotations[gitopsv1alpha1.ReconcileRequestAnnotation]))
	}).Should(Succeed())
	a2, _ := getCM(t, ns, "a")
	g.Expect(a2.ResourceVersion).To(Equal(a.ResourceVersion))
}

// TestDeletionPrunesOrOrphans: deleting a Sync with prune deletes its
// objects except opted-out ones; without prune it orphans them.
func TestDeletionPrunesOrOrphans(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	_, h1, _ := setupRepo(t, ns, map[string]string{
		"pruned/a.yaml": configMap("a", nil),
		"pruned/b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  annotations:\n    converge.dev/prune: disabled\n",
		"orphan/c.yaml": configMap("c", nil),
	})
	pr := newSync(ns, "pruned", "app", "pruned", true)
	or := newSync(ns, "orphan", "app", "orphan", false)
	g.Expect(env.Client.Create(t.Context(), pr)).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), or)).To(Succeed())
	waitApplied(t, g, ns, "pruned", h1)
	waitApplied(t, g, ns, "orphan", h1)

	g.Expect(env.Client.Delete(t.Context(), pr)).To(Succeed())
	g.Expect(env.Client.Delete(t.Context(), or)).To(Succeed())
	expectGone(t, g, ns, "a")
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pr), &gitopsv1alpha1.Sync{})
		g.Expect(err).To(HaveOccurred())
		err = env.Client.Get(t.Context(), client.ObjectKeyFromObject(or), &gitopsv1alpha1.Sync{})
		g.Expect(err).To(HaveOccurred())
	}).Should(Succeed())
	_, err := getCM(t, ns, "b")
	g.Expect(err).NotTo(HaveOccurred(), "converge.dev/prune: disabled keeps the object")
	_, err = getCM(t, ns, "c")
	g.Expect(err).NotTo(HaveOccurred(), "prune: false orphans")
}
