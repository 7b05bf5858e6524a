package certificate_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

func acmeIssuer(t *testing.T, g Gomega, ns string) {
	t.Helper()
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pebble"}, Spec: pkiv1alpha1.IssuerSpec{ACME: &pkiv1alpha1.ACMEIssuer{
		Server: pebble.Directory, Email: "admin@example.com", CABundle: pebble.CABundle,
		PrivateKeySecretRef: pkiv1alpha1.SecretKeySelector{Name: "pebble-account"},
		Solvers:             []pkiv1alpha1.ACMESolver{{HTTP01: &pkiv1alpha1.ACMEHTTP01Solver{}}}}}}
	g.Expect(env.Client.Create(t.Context(), iss)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(iss), iss)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue())
		g.Expect(iss.Status.ACME.URI).To(HavePrefix("https://127.0.0.1:"))
	}).Should(Succeed())
}

// TestACME: a real Pebble issues through HTTP-01 answered by the manager;
// the chain verifies with Pebble's root (x509, openssl, TLS handshake).
func TestACME(t *testing.T) {
	testenv.Need(t, env)
	needPebble(t)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	acmeIssuer(t, g, ns)
	c := newCert(ns, "site", "pebble", "site.example.test", "www.site.example.test")
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue(), "%v", c.Status.Conditions)
	}).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	root, err := pebble.Roots(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	verifyServing(t, g, getSecret(t, ns, "site-tls"), root, "www.site.example.test")
}

// TestACMEChallengeUnreachable: the order fails with Pebble's problem
// document, the Certificate says so and backs off (one order, next try in
// 1h).
func TestACMEChallengeUnreachable(t *testing.T) {
	testenv.Need(t, env)
	needPebble(t)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	acmeIssuer(t, g, ns)
	g.Expect(pebble.SetA(t.Context(), "down.example.test", "127.0.0.2")).To(Succeed())
	c := newCert(ns, "down", "pebble", "down.example.test")
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		cond := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(pkiv1alpha1.IssuanceFailedReason))
		g.Expect(cond.Message).To(ContainSubstring("down.example.test"))
	}).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(ptr.Deref(c.Status.FailedIssuanceAttempts, 0)).To(BeEquivalentTo(1))
	var cr pkiv1alpha1.CertificateRequest
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "down-1"}, &cr)).To(Succeed())
	g.Expect(meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.FailedReason))
	g.Consistently(func(g Gomega) {
		var crs pkiv1alpha1.CertificateRequestList
		g.Expect(env.Client.List(t.Context(), &crs, client.InNamespace(ns))).To(Succeed())
		g.Expect(crs.Items).To(HaveLen(1))
	}).WithTimeout(3 * time.Second).Should(Succeed())
}

// TestACMERefusesCA: an ACME issuer cannot issue a CA certificate. The
// request is refused as InvalidRequest naming spec.isCA, the Certificate
// records one failed attempt and backs off; no order reaches the server and
// no second request follows (without the refusal the leaf Pebble returns
// reads as a changed spec, and the Certificate would order again and again).
func TestACMERefusesCA(t *testing.T) {
	testenv.Need(t, env)
	needPebble(t)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	acmeIssuer(t, g, ns)
	c := newCert(ns, "ca", "pebble", "ca.example.test")
	c.Spec.IsCA = true
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		cond := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(pkiv1alpha1.IssuanceFailedReason), cond.Message)
		g.Expect(cond.Message).To(ContainSubstring("spec.isCA"))
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(ptr.Deref(c.Status.FailedIssuanceAttempts, 0)).To(BeEquivalentTo(1))
	var cr pkiv1alpha1.CertificateRequest
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "ca-1"}, &cr)).To(Succeed())
	g.Expect(meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.InvalidRequestCondition)).To(
		And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", pkiv1alpha1.InvalidRequestReason)))
	g.Consistently(func(g Gomega) {
		var crs pkiv1alpha1.CertificateRequestList
		g.Expect(env.Client.List(t.Context(), &crs, client.InNamespace(ns))).To(Succeed())
		g.Expect(crs.Items).To(HaveLen(1))
		g.Expect(getSecretErr(t, ns, "ca-tls")).To(HaveOccurred(), "no Secret from a refused request")
	}).WithTimeout(3 * time.Second).Should(Succeed())
}
