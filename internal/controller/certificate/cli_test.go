package certificate_test

import (
	"bytes"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/certcli"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestCLIRenewAndStatus: `converge cert renew` reissues a current
// certificate (ManuallyTriggered); `status` and `inspect secret` show the
// chain, the renewal and the last request.
func TestCLIRenewAndStatus(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	selfSignedIssuer(t, ns, "selfsigned")
	g.Expect(env.Client.Create(t.Context(), newCert(ns, "cli", "selfsigned", "cli.example.com"))).To(Succeed())
	c := waitCert(t, g, ns, "cli", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	first := getSecret(t, ns, "cli-tls")

	var patched *pkiv1alpha1.Certificate
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.IssuingCondition)).To(BeNil())
		var err error
		patched, err = certcli.Renew(t.Context(), env.Client, ns, "cli")
		g.Expect(err).NotTo(HaveOccurred())
	}).Should(Succeed())
	g.Expect(meta.FindStatusCondition(patched.Status.Conditions, pkiv1alpha1.IssuingCondition).Reason).To(Equal(pkiv1alpha1.ManuallyTriggeredReason))
	rev := ptr.Deref(patched.Status.Revision, 0)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(ptr.Deref(c.Status.Revision, 0)).To(BeNumerically(">", rev))
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.IssuingCondition)).To(BeNil())
	}).Should(Succeed())
	g.Expect(getSecret(t, ns, "cli-tls").Data["tls.crt"]).NotTo(Equal(first.Data["tls.crt"]))

	var out bytes.Buffer
	g.Expect(certcli.Status(t.Context(), env.Client, &out, ns, "cli")).To(Succeed())
	g.Expect(out.String()).To(And(ContainSubstring("Renewal:"), ContainSubstring("names=cli.example.com")))
	out.Reset()
	g.Expect(certcli.InspectSecret(t.Context(), env.Client, &out, ns, "cli-tls")).To(Succeed())
	g.Expect(out.String()).To(And(ContainSubstring("matches tls.crt: true"), ContainSubstring("verifies tls.crt: yes")))
}
