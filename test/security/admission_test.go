package security

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

// TestUpgradeAdmissionCostsNoAPIRead: the MachineUpgrade webhook checks a
// new upgrade against the others of its namespace and the Machines it
// selects. Answering that with an uncached read made every admission
// request (which anyone reaching the webhook port can send) an API LIST.
// 40 admission requests (dry-run creates by the admin — MachineUpgrades are not a tenant's kind — each past the webhook's
// early return, since another MachineUpgrade exists) must cost the API
// server far fewer than 40 LISTs of MachineUpgrades and Machines.
func TestUpgradeAdmissionCostsNoAPIRead(t *testing.T) {
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()
	mk := func(name, pool string) *upgradev1alpha1.MachineUpgrade {
		return &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: upgradev1alpha1.MachineUpgradeSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
				Image: "debian-13", Version: "v2"}}
	}
	g.Expect(env.Client.Create(ctx, mk("first", "a"))).To(Succeed())
	const n = 40
	before := apiRequests(t, []string{"machineupgrades", "machines"}, "GET", "LIST")
	for i := range n {
		g.Expect(env.Client.Create(ctx, mk(fmt.Sprintf("probe-%d", i), "b"), client.DryRunAll)).To(Succeed())
	}
	reads := apiRequests(t, []string{"machineupgrades", "machines"}, "GET", "LIST") - before
	g.Expect(reads).To(BeNumerically("<", n/4),
		"%d MachineUpgrade admissions cost %v API reads of MachineUpgrades and Machines", n, reads)
}
