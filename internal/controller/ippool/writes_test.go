package ippool_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// writes sums client-go's rest_client_requests_total over the methods that
// write, for every client in this process (the suite's manager and the
// test's own client).
func writes(g Gomega) float64 {
	mfs, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "rest_client_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && l.GetValue() != http.MethodGet {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// API writes per allocation, measured: 50 configs created at once, every
// write the process sends counted (the test's 50 creates subtracted);
// the design is 3 per one-NIC config (finalizer, pool status, config
// status) plus conflict retries and the pool controller's recounts.
func TestAPIWritesPerAllocation(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	g.Expect(env.Client.Create(ctx, newPool(ns, "lan", "lan", "10.26.0.0/24", "10.26.0.10", "10.26.0.250"))).To(Succeed())
	time.Sleep(time.Second) // let the pool's own status settle
	const n = 50
	before := writes(g)
	for i := range n {
		g.Expect(env.Client.Create(ctx, newMNC(ns, fmt.Sprintf("w%02d", i), "lan", 5000+i, ""))).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		var list dhcpv1alpha1.MachineNetworkConfigList
		g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		ready := 0
		for i := range list.Items {
			if reconcile.IsTrue(list.Items[i].Status.Conditions, dhcpv1alpha1.ReadyCondition) {
				ready++
			}
		}
		g.Expect(ready).To(Equal(n))
	}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	time.Sleep(2 * time.Second) // the pool controller's last recount
	perAlloc := (writes(g) - before - n) / n
	t.Logf("API writes per allocation (one-NIC config, %d at once): %.2f", n, perAlloc)
	g.Expect(perAlloc).To(BeNumerically("<=", 6), "writes per allocation")
	g.Expect(perAlloc).To(BeNumerically(">=", 3), "the counter missed writes")
}
