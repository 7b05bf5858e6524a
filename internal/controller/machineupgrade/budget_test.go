package machineupgrade_test

import (
	"testing"

	. "github.com/onsi/gomega"

	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

// While its Machines boot, an upgrade waits on the cache: it read every
// waiting Machine past the cache on every reconcile (each Machine event
// wakes it), which spent the controller's API budget on reads and made
// bench/upgrade several times its floor. A Machine is read from the API
// server for its power cycle and to confirm what WaitForBoot acts on
// (back, or off long enough for a kick), a handful of times each.
func TestWaitForBootWaitsOnTheCache(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	const n = 6
	fleet(t, ns, "w", n)
	before := env.APIRequests(t, []string{"machines"}, "GET")
	u := newUpgrade(ns, "to-v2", "w", n)
	g.Expect(env.Client.Create(t.Context(), u)).To(Succeed())
	waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded), "status %+v", u.Status)
	})
	gets := env.APIRequests(t, []string{"machines"}, "GET") - before
	t.Logf("Machine GETs on the API server during the upgrade of %d Machines: %.0f", n, gets)
	// One read for the power cycle and one to confirm the boot, per
	// Machine (measured: 12 for 6; 18 when every reconcile read every
	// waiting Machine), and a little slack for a retried step.
	g.Expect(gets).To(BeNumerically("<=", 2*n+2), "Machines read past the cache while they boot")
}
