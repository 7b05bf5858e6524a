package certificate_test

import (
	"testing"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// certMetrics gathers the manager's registry and returns the samples of
// family whose namespace and name labels are ns and name, by their other
// labels (name=value pairs joined with ",").
func certMetrics(g Gomega, family, ns, name string) map[string]float64 {
	fams, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] != ns || l["name"] != name {
				continue
			}
			out["condition="+l["condition"]+",issuer="+l["issuer_kind"]+"/"+l["issuer_name"]+"."+l["issuer_group"]] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 { return m.GetGauge().GetValue() }

// TestMetrics: a Ready Certificate has its expiry, renewal and Ready series
// (made at scrape time from the cache); they go away with the Certificate.
func TestMetrics(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	selfSignedIssuer(t, ns, "selfsigned")
	c := newCert(ns, "metered", "selfsigned", "metered.example.com")
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	c = waitCert(t, g, ns, "metered", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	const iss = ",issuer=Issuer/selfsigned.pki.converge.dev"
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(certMetrics(g, "converge_certificate_expiration_timestamp_seconds", ns, "metered")).To(Equal(map[string]float64{
			"condition=" + iss: float64(c.Status.NotAfter.Unix())}))
		g.Expect(certMetrics(g, "converge_certificate_renewal_timestamp_seconds", ns, "metered")).To(Equal(map[string]float64{
			"condition=" + iss: float64(c.Status.RenewalTime.Unix())}))
		g.Expect(certMetrics(g, "converge_certificate_ready_status", ns, "metered")).To(Equal(map[string]float64{
			"condition=True" + iss: 1, "condition=False" + iss: 0, "condition=Unknown" + iss: 0}))
	}).Should(Succeed())
	g.Expect(env.Client.Delete(t.Context(), c)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		for _, f := range []string{"converge_certificate_expiration_timestamp_seconds", "converge_certificate_renewal_timestamp_seconds", "converge_certificate_ready_status"} {
			g.Expect(certMetrics(g, f, ns, "metered")).To(BeEmpty(), f)
		}
	}).Should(Succeed())
}
