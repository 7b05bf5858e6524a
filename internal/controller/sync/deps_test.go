package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestDependsOn: a Sync waits for another Sync (default: Ready) and for a
// ConfigMap gated by a CEL expression.
func TestDependsOn(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	_, h1, _ := setupRepo(t, ns, map[string]string{
		"first/a.yaml":  configMap("first", nil),
		"second/b.yaml": configMap("second", nil),
	})
	second := newSync(ns, "second", "app", "second", true)
	second.Spec.DependsOn = []gitopsv1alpha1.Dependency{
		{Name: "first"},
		{APIVersion: "v1", Kind: "ConfigMap", Name: "gate", Ready: `self.data.open == "yes"`},
	}
	g.Expect(env.Client.Create(t.Context(), second)).To(Succeed())
	c := waitReason(t, g, ns, "second", gitopsv1alpha1.DependencyNotReadyReason)
	g.Expect(c.Message).To(ContainSubstring("Sync " + ns + "/first"))

	first := newSync(ns, "first", "app", "first", true)
	g.Expect(env.Client.Create(t.Context(), first)).To(Succeed())
	waitApplied(t, g, ns, "first", h1)
	waitReason(t, g, ns, "second", gitopsv1alpha1.DependencyNotReadyReason, "ConfigMap "+ns+"/gate")

	gate := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gate"}, Data: map[string]string{"open": "no"}}
	g.Expect(env.Client.Create(t.Context(), gate)).To(Succeed())
	waitReason(t, g, ns, "second", gitopsv1alpha1.DependencyNotReadyReason, `self.data.open == "yes" is false`)
	_, err := getCM(t, ns, "second")
	g.Expect(err).To(HaveOccurred(), "nothing applied while a dependency is not ready")

	gate.Data["open"] = "yes"
	g.Expect(env.Client.Update(t.Context(), gate)).To(Succeed())
	waitApplied(t, g, ns, "second", h1)
}

// TestImpersonation: writes go through the service account; what it may
// not do is refused with the API error, and nothing is pruned.
func TestImpersonation(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	ctx := t.Context()
	g.Expect(env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}})).To(Succeed())
	g.Expect(env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}})).To(Succeed())
	g.Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmaps"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "deployer"}}})).To(Succeed())

	repo, h1, gr := setupRepo(t, ns, map[string]string{"app/a.yaml": configMap("a", nil)})
	sy := newSync(ns, "app", "app", "app", true)
	sy.Spec.ServiceAccountName = "deployer"
	g.Expect(env.Client.Create(ctx, sy)).To(Succeed())
	waitApplied(t, g, ns, "app", h1)

	repo.Commit(t, "add a secret", map[string]string{"app/s.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  k: v\n"})
	requestReconcile(t, gr)
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.ApplyFailedReason)
	g.Expect(c.Message).To(ContainSubstring("forbidden"))
	g.Expect(c.Message).To(ContainSubstring("system:serviceaccount:" + ns + ":deployer"))
	_, err := getCM(t, ns, "a")
	g.Expect(err).NotTo(HaveOccurred())
	sec := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, clientKey(ns, "s"), sec)).NotTo(Succeed())
}
