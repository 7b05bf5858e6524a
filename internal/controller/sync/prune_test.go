package sync_test

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitopscli"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestPruneLimitHoldsUntilApproved: removing 3 of 4 objects exceeds the
// default 50%: the rest is applied, nothing is deleted, status.pendingPrune
// lists the three, and approving that revision prunes them.
func TestPruneLimitHoldsUntilApproved(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	files := map[string]string{}
	for i := range 4 {
		files[fmt.Sprintf("app/cm%d.yaml", i)] = configMap(fmt.Sprintf("cm%d", i), nil)
	}
	repo, h1, gr := setupRepo(t, ns, files)
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "app", "app", true))).To(Succeed())
	waitApplied(t, g, ns, "app", h1)

	repo.Delete(t, "mass delete", "app/cm1.yaml", "app/cm2.yaml", "app/cm3.yaml")
	h2 := repo.Commit(t, "and change cm0", map[string]string{"app/cm0.yaml": configMap("cm0", map[string]string{"v": "2"})})
	requestReconcile(t, gr)
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.PruneLimitExceededReason)
	g.Expect(c.Message).To(ContainSubstring("held for approval"))
	expectCM(t, g, ns, "cm0", map[string]string{"v": "2"}) // the rest is applied
	s := getSync(g, t, ns, "app")
	g.Expect(s.Status.PendingPrune).NotTo(BeNil())
	g.Expect(s.Status.PendingPrune.Count).To(Equal(int32(3)))
	g.Expect(s.Status.PendingPrune.Limit).To(Equal(int32(2)))
	g.Expect(s.Status.PendingPrune.Revision).To(HaveSuffix(h2))
	g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.PruneHeldCondition)).To(BeTrue())
	g.Expect(s.Status.Inventory).To(HaveLen(4), "held objects stay in the inventory")
	for i := 1; i < 4; i++ {
		_, err := getCM(t, ns, fmt.Sprintf("cm%d", i))
		g.Expect(err).NotTo(HaveOccurred())
	}

	// Approving another revision does nothing; approving this one prunes.
	patch := func(v string) {
		p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ApprovePruneAnnotation, v)
		g.Expect(env.Client.Patch(t.Context(), s, client.RawPatch("application/merge-patch+json", p))).To(Succeed())
	}
	patch("main@sha1:0000000000000000000000000000000000000000")
	waitReason(t, g, ns, "app", gitopsv1alpha1.PruneLimitExceededReason)
	// `converge sync approve-prune` approves the held revision.
	var out strings.Builder
	g.Expect(gitopscli.ApprovePrune(t.Context(), env.Client, &out, client.ObjectKeyFromObject(s))).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("approved pruning 3 objects"))
	s = waitApplied(t, g, ns, "app", h2)
	g.Expect(s.Status.PendingPrune).To(BeNil())
	g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/cm0"))
	for i := 1; i < 4; i++ {
		expectGone(t, g, ns, fmt.Sprintf("cm%d", i))
	}
}

// TestPruneNeverDeletesForeignObjects: an object removed from git is
// pruned only if it is still this Sync's: labelled for this Sync (name and
// namespace) and applied by the Sync field manager. Three impostors stay:
// b recreated by someone else with the labels copied (an Update), c
// recreated with the labels copied by someone else's server-side apply,
// and d, still applied by the Sync, relabelled for the Sync of the same
// name in another namespace.
func TestPruneNeverDeletesForeignObjects(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	repo, h1, gr := setupRepo(t, ns, map[string]string{"app/a.yaml": configMap("a", nil), "app/b.yaml": configMap("b", nil),
		"app/c.yaml": configMap("c", nil), "app/d.yaml": configMap("d", nil)})
	sy := newSync(ns, "app", "app", "app", true)
	sy.Spec.PruneLimit = ptr.To(intstr.FromString("100%")) // three of four go: over the default limit
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	waitApplied(t, g, ns, "app", h1)

	s := getSync(g, t, ns, "app")
	suspend(t, g, s, true) // keep the Sync from recreating them meanwhile
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(g, t, ns, "app")
		g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
	}).Should(Succeed())
	replace := func(name string) *corev1.ConfigMap {
		cm, err := getCM(t, ns, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(env.Client.Delete(t.Context(), cm)).To(Succeed())
		testenv.Eventually(g, func(g Gomega) {
			_, err := getCM(t, ns, name)
			g.Expect(err).To(HaveOccurred())
		}).Should(Succeed())
		cm.ResourceVersion, cm.UID, cm.ManagedFields = "", "", nil
		return cm
	}
	g.Expect(env.Client.Create(t.Context(), replace("b"), client.FieldOwner("someone-else"))).To(Succeed())
	c := replace("c")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(ns)
	u.SetName("c")
	u.SetLabels(c.Labels)
	g.Expect(env.Client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl"))).To(Succeed())
	d, err := getCM(t, ns, "d")
	g.Expect(err).NotTo(HaveOccurred())
	relabel := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, gitopsv1alpha1.SyncNamespaceLabel, "elsewhere")
	g.Expect(env.Client.Patch(t.Context(), d, client.RawPatch("application/merge-patch+json", relabel), client.FieldOwner("someone-else"))).To(Succeed())

	repo.Delete(t, "remove b, c, d", "app/b.yaml", "app/c.yaml", "app/d.yaml")
	h2 := repo.Commit(t, "touch a", map[string]string{"app/a.yaml": configMap("a", map[string]string{"v": "2"})})
	requestReconcile(t, gr)
	testenv.Eventually(g, func(g Gomega) {
		got := &gitopsv1alpha1.GitRepository{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(gr), got)).To(Succeed())
		g.Expect(got.Status.Artifact).NotTo(BeNil())
		g.Expect(got.Status.Artifact.Revision).To(HaveSuffix(h2))
	}).Should(Succeed())
	suspend(t, g, s, false)
	s = waitApplied(t, g, ns, "app", h2)
	g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/a"))
	for _, name := range []string{"b", "c", "d"} {
		_, err = getCM(t, ns, name)
		g.Expect(err).NotTo(HaveOccurred(), "%s: an object that is not this Sync's is never pruned", name)
	}
}

func suspend(t *testing.T, g Gomega, s *gitopsv1alpha1.Sync, on bool) {
	t.Helper()
	p := fmt.Appendf(nil, `{"spec":{"suspend":%t}}`, on)
	g.Expect(env.Client.Patch(t.Context(), s, client.RawPatch("application/merge-patch+json", p))).To(Succeed())
}
