package security

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestPKIIssuerRefMustDeclareTheContract: a Certificate's issuerRef of
// another group resolves only to a namespaced kind whose CRD carries
// contract.converge.dev/issuer. A tenant naming a built-in kind (Role,
// Deployment) or a CRD without the label (Converge's own Database) is
// refused at admission naming spec.issuerRef.kind; one stored around the
// webhook is Stalled, IssuerContractNotDeclared, with no key, no
// CertificateRequest and no Secret made, no informer started on the kind
// it names, and the object it names untouched.
func TestPKIIssuerRefMustDeclareTheContract(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	cert := func(name, group, kind string) *pkiv1alpha1.Certificate {
		return &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name}, Spec: pkiv1alpha1.CertificateSpec{
			SecretName: name, DNSNames: []string{name + ".example.com"},
			IssuerRef: pkiv1alpha1.IssuerReference{Name: "victim", Group: group, Kind: kind}}}
	}
	for _, c := range []*pkiv1alpha1.Certificate{
		cert("role", rbacv1.GroupName, "Role"),
		cert("deployment", "apps", "Deployment"),
		cert("database", "sql.converge.dev", "Database"),
	} {
		err := tn.Client.Create(ctx, c)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", c.Name, err)
		g.Expect(err.Error()).To(ContainSubstring("spec.issuerRef.kind"))
		g.Expect(err.Error()).To(ContainSubstring("contract.converge.dev/issuer"))
	}

	// A Role the tenant's Certificate names, stored around the webhook.
	victim := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "victim"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	g.Expect(env.Client.Create(ctx, victim)).To(Succeed())
	before := apiserverWatches(t, "roles")
	env.SkipValidationForLabelled(t)
	c := cert("role", rbacv1.GroupName, "Role")
	c.Labels = map[string]string{testenv.NoValidationLabel: "true"}
	g.Eventually(func() error { return tn.Client.Create(ctx, c.DeepCopy()) }).WithTimeout(30 * time.Second).Should(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
		stalled := testenv.HasCondition(g, c.Status.Conditions, pkiv1alpha1.StalledCondition, metav1.ConditionTrue, pkiv1alpha1.IssuerContractNotDeclaredReason)
		g.Expect(stalled.Message).To(ContainSubstring("spec.issuerRef.kind"))
		testenv.HasCondition(g, c.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.IssuerContractNotDeclaredReason)
	}).Should(Succeed())
	g.Consistently(func() float64 { return apiserverWatches(t, "roles") }).WithTimeout(3*time.Second).
		Should(BeNumerically("<=", before), "no informer on Roles was started")
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(tn.Client.List(ctx, &crs, client.InNamespace(tn.NS))).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty(), "nothing was requested")
	var secrets corev1.SecretList
	g.Expect(env.Client.List(ctx, &secrets, client.InNamespace(tn.NS))).To(Succeed())
	for _, s := range secrets.Items {
		g.Expect(s.Name).NotTo(HavePrefix("role"), "no key nor certificate was written")
	}
	got := &rbacv1.Role{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(victim), got)).To(Succeed())
	g.Expect(got.ResourceVersion).To(Equal(victim.ResourceVersion), "the Role it names was never written")
	g.Expect(got.OwnerReferences).To(BeEmpty())
}
