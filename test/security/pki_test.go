package security

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/testenv"
)

// caSecret makes a valid CA key pair Secret.
func caSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	key, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, _ := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{CommonName: "victim CA"}, key)
	csr, _ := pki.ParseCSR(csrPEM)
	tmpl, _ := pki.Template(csr, time.Hour, nil, true, time.Now())
	crt, err := pki.Sign(tmpl, nil, key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.EncodeKey(key, pkiv1alpha1.PKCS8)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: keyPEM}}
}

// waitIssuerReason waits until the Issuer's Ready condition has the reason
// (an issuer can show another reason first, before its cache has the CA
// Secret) and returns it.
func waitIssuerReason(t *testing.T, g Gomega, iss *pkiv1alpha1.Issuer, want string) string {
	t.Helper()
	var reason string
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(iss), iss)).To(Succeed())
		c := meta.FindStatusCondition(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		reason = c.Reason
		g.Expect(reason).To(Equal(want), "Ready: %s: %s", c.Reason, c.Message)
	}).Should(Succeed())
	return reason
}

// TestPKIAnotherNamespacesCA: a tenant's ca Issuer naming a CA Secret that
// lives only in another namespace cannot sign with it, and a Certificate
// naming an Issuer of another namespace finds none. Nothing is issued.
func TestPKIAnotherNamespacesCA(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	victim, attacker := env.NewNamespace(t), env.NewNamespace(t)
	g.Expect(env.Client.Create(t.Context(), caSecret(t, victim, "victim-ca"))).To(Succeed())
	victimIssuer := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: victim, Name: "victim"}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "victim-ca"}}}
	g.Expect(env.Client.Create(t.Context(), victimIssuer)).To(Succeed())
	g.Expect(waitIssuerReason(t, g, victimIssuer, pkiv1alpha1.IssuerReadyReason)).To(Equal(pkiv1alpha1.IssuerReadyReason), "control: the victim's issuer works")

	// The attacker names the victim's Secret from its own namespace.
	steal := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: attacker, Name: "steal"}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "victim-ca"}}}
	g.Expect(env.Client.Create(t.Context(), steal)).To(Succeed())
	g.Expect(waitIssuerReason(t, g, steal, pkiv1alpha1.CASecretInvalidReason)).To(Equal(pkiv1alpha1.CASecretInvalidReason))
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(steal), steal)).To(Succeed())
		g.Expect(meta.FindStatusCondition(steal.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.CASecretInvalidReason))
	}).WithTimeout(time.Second).Should(Succeed(), "and it stays refused")
	g.Expect(steal.Status.Conditions[0].Message).To(ContainSubstring(attacker + "/victim-ca not found"))

	// The attacker names the victim's Issuer.
	for _, name := range []string{"steal", "victim"} {
		c := &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: attacker, Name: "via-" + name}, Spec: pkiv1alpha1.CertificateSpec{
			SecretName: "via-" + name, DNSNames: []string{"bank.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: name}}}
		g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	}
	want := map[string]string{"via-steal": pkiv1alpha1.IssuerNotReadyReason, "via-victim": pkiv1alpha1.IssuerNotFoundReason}
	for name, reason := range want {
		testenv.Eventually(g, func(g Gomega) {
			var c pkiv1alpha1.Certificate
			g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: attacker, Name: name}, &c)).To(Succeed())
			g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", reason))
		}).Should(Succeed())
	}
	var secrets corev1.SecretList
	g.Expect(env.Client.List(t.Context(), &secrets, client.InNamespace(attacker))).To(Succeed())
	for _, s := range secrets.Items {
		g.Expect(s.Data).NotTo(HaveKey(corev1.TLSCertKey), "no certificate was issued in the attacker's namespace: %s", s.Name)
	}
}

// TestPKIForeignSecretNeverOverwritten: a Certificate naming an existing
// Secret it did not write (say, another app's credentials) leaves it intact
// and says SecretNotOwned.
func TestPKIForeignSecretNeverOverwritten(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	g.Expect(env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-credentials"},
		Data: map[string][]byte{"password": []byte("s3cret")}})).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ss"},
		Spec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}})).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clobber"},
		Spec: pkiv1alpha1.CertificateSpec{SecretName: "db-credentials", DNSNames: []string{"x.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ss"}}})).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		var c pkiv1alpha1.Certificate
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "clobber"}, &c)).To(Succeed())
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.SecretNotOwnedReason))
	}).Should(Succeed())
	g.Consistently(func(g Gomega) {
		var s corev1.Secret
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "db-credentials"}, &s)).To(Succeed())
		g.Expect(s.Data).To(Equal(map[string][]byte{"password": []byte("s3cret")}))
	}).WithTimeout(2 * time.Second).Should(Succeed())
}
