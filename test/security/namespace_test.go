package security

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestNamespaceDefaultingStaysInTheTenant: manifests without
// metadata.namespace are the tenant's to write, and defaulting must never
// place them where the tenant could not: with no targetNamespace they land
// in the Sync's own namespace (not "default", not the manager's), and a
// targetNamespace naming another tenant's namespace is refused by the API
// server as the tenant (Forbidden, nothing lands there).
func TestNamespaceDefaultingStaysInTheTenant(t *testing.T) {
	t.Parallel()
	a, b := newTenant(t), newTenant(t)
	tenantRepo(t, a, map[string]string{
		"app/cm.yaml": configMap("", "nsless-"+a.NS, map[string]string{"by": a.NS}),
	})
	g := NewWithT(t)

	own := tenantSync(a, "own", "app")
	own.Spec.TargetNamespace = ""
	g.Expect(a.Client.Create(t.Context(), own)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: a.NS, Name: "nsless-" + a.NS}, &corev1.ConfigMap{})).To(Succeed())
	}).Should(Succeed())
	for _, ns := range []string{"default", "kube-system", b.NS} {
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "nsless-" + a.NS}, &corev1.ConfigMap{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the object without a namespace landed in %s: %v", ns, err)
	}

	// The same object defaulted into the other tenant's namespace.
	other := tenantSync(a, "other", "app")
	other.Spec.TargetNamespace = b.NS
	g.Expect(a.Client.Create(t.Context(), other)).To(Succeed())
	waitSyncReason(t, g, a.NS, "other", gitopsv1alpha1.ApplyFailedReason,
		`configmaps "nsless-`+a.NS+`" is forbidden: User "`+a.User+`"`)
	err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: b.NS, Name: "nsless-" + a.NS}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the object landed in another tenant's namespace: %v", err)
}
