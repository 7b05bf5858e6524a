package security

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestPKIKeyGenerationFair: a tenant asking for many 4096-bit RSA keys does
// not make another namespace's issuance wait behind them: RSA keys are made
// one per namespace at a time (the certificate controller's keyGate), so
// the victim's Certificate, created after the attacker's, is issued while
// most of the attacker's still wait, and those say so on Issuing (with the
// keys made in the workers, the victim's request waited behind the
// attacker's in the queue and came out after most of them).
func TestPKIKeyGenerationFair(t *testing.T) {
	attacker, victim := newTenant(t), newTenant(t)
	g := NewWithT(t)
	for _, tn := range []*tenant{attacker, victim} {
		g.Expect(tn.Client.Create(t.Context(), &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "ss"},
			Spec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}})).To(Succeed())
		testenv.Eventually(g, func(g Gomega) {
			var iss pkiv1alpha1.Issuer
			g.Expect(tn.Client.Get(t.Context(), client.ObjectKey{Namespace: tn.NS, Name: "ss"}, &iss)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue())
		}).Should(Succeed())
	}
	rsa := func(tn *tenant, name string) *pkiv1alpha1.Certificate {
		return &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name}, Spec: pkiv1alpha1.CertificateSpec{
			SecretName: name, DNSNames: []string{name + ".example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ss"},
			PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.RSAKeyAlgorithm, Size: 4096}}}
	}
	const n = 16
	for i := range n {
		g.Expect(attacker.Client.Create(t.Context(), rsa(attacker, fmt.Sprintf("flood-%d", i)))).To(Succeed())
	}
	v := rsa(victim, "victim")
	g.Expect(victim.Client.Create(t.Context(), v)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(victim.Client.Get(t.Context(), client.ObjectKeyFromObject(v), v)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(v.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue())
	}).Should(Succeed())
	var l pkiv1alpha1.CertificateList
	g.Expect(attacker.Client.List(t.Context(), &l, client.InNamespace(attacker.NS))).To(Succeed())
	ready, waiting := 0, 0
	for i := range l.Items {
		c := &l.Items[i]
		if meta.IsStatusConditionTrue(c.Status.Conditions, pkiv1alpha1.ReadyCondition) {
			ready++
		}
		if cond := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.IssuingCondition); cond != nil &&
			strings.Contains(cond.Message, "waiting for a turn to generate the private key") {
			waiting++
		}
	}
	t.Logf("when the victim's Certificate was issued, %d of the attacker's %d were issued and %d waited", ready, n, waiting)
	g.Expect(ready).To(BeNumerically("<", n/2), "the victim's issuance did not wait behind the attacker's keys")
	g.Expect(waiting).To(BeNumerically(">", 0), "the attacker's Certificates say they wait for their turn")
}
