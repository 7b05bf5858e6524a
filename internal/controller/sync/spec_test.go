package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestForceRecreatesOnImmutableChange: changing an immutable ConfigMap
// fails with the API's message; with force the object is recreated.
func TestForceRecreatesOnImmutableChange(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	immutable := func(v string) string { return configMap("frozen", map[string]string{"v": v}) + "immutable: true\n" }
	repo, h1, gr := setupRepo(t, ns, map[string]string{"app/cm.yaml": immutable("1")})
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "app", "app", true))).To(Succeed())
	waitApplied(t, g, ns, "app", h1)
	before, err := getCM(t, ns, "frozen")
	g.Expect(err).NotTo(HaveOccurred())

	h2 := repo.Commit(t, "change", map[string]string{"app/cm.yaml": immutable("2")})
	requestReconcile(t, gr)
	waitReason(t, g, ns, "app", gitopsv1alpha1.ApplyFailedReason, "immutable")

	p := []byte(`{"spec":{"force":true}}`)
	g.Expect(env.Client.Patch(t.Context(), &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}, rawMerge(p))).To(Succeed())
	waitApplied(t, g, ns, "app", h2)
	after, err := getCM(t, ns, "frozen")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.UID).NotTo(Equal(before.UID), "recreated")
	g.Expect(after.Data).To(Equal(map[string]string{"v": "2"}))
}

// TestCrossNamespaceSourceRefused and admission: a Sync may not use another
// namespace's GitRepository unless the manager allows it; malformed CEL is
// refused at admission with the field and the CEL error.
func TestCrossNamespaceSourceRefusedAndAdmission(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	sy := newSync(ns, "app", "app", "", true)
	sy.Spec.SourceRef.Namespace = "other"
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.AccessDeniedReason, "cross-namespace")
	g.Expect(c.Message).To(ContainSubstring("other/app"))
	s := getSync(g, t, ns, "app")
	g.Expect(s.Status.Conditions).To(ContainElement(HaveField("Type", gitopsv1alpha1.StalledCondition)))

	bad := newSync(ns, "bad", "app", "", true)
	bad.Spec.DependsOn = []gitopsv1alpha1.Dependency{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", Ready: "self.data.x == "}}
	err := env.Client.Create(t.Context(), bad)
	g.Expect(err).To(MatchError(ContainSubstring("spec.dependsOn[0].ready")))
	g.Expect(err).To(MatchError(ContainSubstring("invalid CEL expression")))

	noPrune := newSync(ns, "noprune", "app", "", true)
	noPrune.Spec.Prune = nil
	err = env.Client.Create(t.Context(), noPrune)
	g.Expect(err).To(MatchError(ContainSubstring("spec.prune")))
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(noPrune), noPrune)).NotTo(Succeed())
}
