package upgradeoverlap_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/upgradeoverlap"
)

func upgrade(name string, created time.Time, claimed ...upgradev1alpha1.MachineState) upgradev1alpha1.MachineUpgrade {
	u := upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Time{Time: created}}}
	u.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	for i, st := range claimed {
		u.Status.Machines = append(u.Status.Machines, upgradev1alpha1.MachineProgress{Name: []string{"a-0", "a-1"}[i], State: st})
	}
	return u
}

// TestGoesFirst: of two MachineUpgrades sharing Machines, every reader
// picks the same one to go on, whatever each has claimed; and one that has
// started a Machine is never overtaken.
func TestGoesFirst(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	ms := []machinev1alpha1.Machine{
		{ObjectMeta: metav1.ObjectMeta{Name: "a-0", Labels: map[string]string{"pool": "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a-1", Labels: map[string]string{"pool": "a"}}},
	}
	p, r := upgradev1alpha1.MachinePending, upgradev1alpha1.MachineUpgrading
	for _, tc := range []struct {
		name           string
		a, b           upgradev1alpha1.MachineUpgrade
		aWaits, bWaits bool
	}{
		{"neither claimed: older goes first", upgrade("a", t0), upgrade("b", t0.Add(time.Second)), false, true},
		{"neither claimed, same second: by name", upgrade("b", t0), upgrade("a", t0), true, false},
		// b gives its claim back (the controller clears it); then the
		// first row applies.
		{"only the younger claimed: both wait until it gives the claim back", upgrade("a", t0), upgrade("b", t0.Add(time.Second), p, p), true, true},
		{"only the older claimed: it goes first", upgrade("a", t0, p, p), upgrade("b", t0.Add(time.Second)), false, true},
		{"both claimed: older goes first", upgrade("a", t0, p, p), upgrade("b", t0.Add(time.Second), p, p), false, true},
		{"the younger started: it goes first", upgrade("a", t0, p, p), upgrade("b", t0.Add(time.Second), r, p), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			both := []upgradev1alpha1.MachineUpgrade{tc.a, tc.b}
			aWaits := upgradeoverlap.Blocking(&tc.a, both, ms) != nil
			bWaits := upgradeoverlap.Blocking(&tc.b, both, ms) != nil
			g.Expect(aWaits).To(Equal(tc.aWaits), "a waits")
			g.Expect(bWaits).To(Equal(tc.bWaits), "b waits")
		})
	}

	t.Run("finished and unrelated upgrades hold nothing", func(t *testing.T) {
		done := upgrade("done", t0)
		done.Status.Phase = upgradev1alpha1.PhaseSucceeded
		other := upgrade("other", t0)
		other.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}}
		u := upgrade("u", t0.Add(time.Second))
		g.Expect(upgradeoverlap.First(&u, []upgradev1alpha1.MachineUpgrade{done, other, u}, ms, upgradeoverlap.Any)).To(BeNil())
	})

	t.Run("the message names the first and the Machines", func(t *testing.T) {
		a, b := upgrade("a", t0), upgrade("b", t0.Add(time.Second))
		c := upgradeoverlap.First(&b, []upgradev1alpha1.MachineUpgrade{b, a}, ms, upgradeoverlap.Any)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message()).To(Equal("MachineUpgrade a (phase Pending) already upgrades Machine(s) a-0, a-1; wait for it to finish, or abort it"))
	})
}
