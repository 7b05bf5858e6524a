package machineupgrade_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestOverlapWaitsInTheController: admission refuses a MachineUpgrade that
// shares Machines with an unfinished one, but two admitted at the same
// moment (or one stored without the webhook) get past it. The controller
// applies the rule again: the second waits (WaitingForUpgrade, naming the
// first) touching no Machine; a claim it made on the Machines at the same
// moment as the first is given back before any side effect; once the first
// is done (here aborted, which touches no Machine, so only the first's own
// change can wake the second) the second runs. The webhook is skipped here for the labelled
// MachineUpgrade only (testenv.SkipValidationForLabelled).
func TestOverlapWaitsInTheController(t *testing.T) {
	ns := need(t)
	env.SkipValidationForLabelled(t)
	g := NewWithT(t)
	ctx := t.Context()
	ms := fleet(t, ns, "ov", 2)

	first := newUpgrade(ns, "first", "ov", 2)
	first.Spec.Paused = true
	g.Expect(env.Client.Create(ctx, first)).To(Succeed())
	second := newUpgrade(ns, "second", "ov", 2)
	second.Labels = map[string]string{testenv.NoValidationLabel: "true"}
	second.Spec.Image, second.Spec.Version = "v3", "3.0"
	second.Spec.PostChecks = nil
	// The API server reloads webhook configurations asynchronously.
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Create(ctx, second.DeepCopy())).To(Succeed())
	}).Should(Succeed())

	waiting := func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		r := meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.ReadyCondition)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Reason).To(Equal(upgradev1alpha1.WaitingForUpgradeReason), r.Message)
		g.Expect(r.Message).To(ContainSubstring("MachineUpgrade first (phase Paused) already upgrades Machine(s) ov-0, ov-1"))
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhasePending))
		g.Expect(u.Status.Machines).To(BeEmpty(), "no claim on the Machines")
		p := meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.ProgressingCondition)
		g.Expect(p).NotTo(BeNil())
		g.Expect(p.Reason).To(Equal(upgradev1alpha1.WaitingForUpgradeReason))
		g.Expect(meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.StalledCondition)).To(BeNil())
	}
	waitUpgrade(t, second, waiting)
	waitUpgrade(t, first, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhasePaused))
	})
	images := func(g Gomega) []string {
		var out []string
		for _, m := range ms {
			got := &machinev1alpha1.Machine{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
			out = append(out, got.Spec.Image)
		}
		return out
	}
	g.Consistently(func(g Gomega) {
		g.Expect(images(g)).To(Equal([]string{"v1", "v1"}), "the waiting upgrade touches no Machine")
		got := &upgradev1alpha1.MachineUpgrade{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(second), got)).To(Succeed())
		waiting(g, got)
	}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	// The second claims the Machines at the same moment as the first could
	// (written here as its own claim checkpoint would be): it gives the
	// claim back, since the first goes first, before touching a Machine.
	got := &upgradev1alpha1.MachineUpgrade{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(second), got)).To(Succeed())
	base := got.DeepCopy()
	got.Status.Steps = []upgradev1alpha1.StepStatus{
		{Name: upgradev1alpha1.StepPreChecks, State: upgradev1alpha1.StepStateSucceeded},
		{Name: upgradev1alpha1.StepMachines, State: upgradev1alpha1.StepStateRunning, Started: &metav1.Time{Time: time.Now()}, Attempts: 1},
		{Name: upgradev1alpha1.StepPostChecks, State: upgradev1alpha1.StepStatePending},
	}
	got.Status.Machines = []upgradev1alpha1.MachineProgress{
		{Name: "ov-0", State: upgradev1alpha1.MachinePending, PreviousImage: "v1", PreviousVersion: "1.0"},
		{Name: "ov-1", State: upgradev1alpha1.MachinePending, PreviousImage: "v1", PreviousVersion: "1.0"},
	}
	g.Expect(env.Client.Status().Patch(ctx, got, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	waitUpgrade(t, second, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		waiting(g, u)
		g.Expect(u.Status.Steps).NotTo(ContainElement(HaveField("State", upgradev1alpha1.StepStateSucceeded)),
			"its pre-checks run again once the way is free")
	})
	g.Expect(images(g)).To(Equal([]string{"v1", "v1"}))

	// The first is aborted before it touched a Machine: it finishes
	// without a Machine event, and its own change wakes the second, which
	// runs.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(first), got)).To(Succeed())
	base = got.DeepCopy()
	got.Spec.Paused, got.Spec.Abort = false, true
	g.Expect(env.Client.Patch(ctx, got, client.MergeFrom(base))).To(Succeed())
	f := waitUpgrade(t, first, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseAborted), "%v", u.Status.Conditions)
	})
	s := waitUpgrade(t, second, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded), "%v", u.Status.Conditions)
	})
	g.Expect(images(g)).To(Equal([]string{"v3", "v3"}))
	for _, mp := range f.Status.Machines {
		g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineAborted))
	}
	aborted := meta.FindStatusCondition(f.Status.Conditions, upgradev1alpha1.ReadyCondition)
	g.Expect(aborted.Reason).To(Equal(upgradev1alpha1.AbortedReason))
	for _, mp := range s.Status.Machines {
		g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineUpgraded))
		g.Expect(mp.PreviousImage).To(Equal("v1"))
		g.Expect(mp.Started.Before(&aborted.LastTransitionTime)).To(BeFalse(), "the second started no Machine before the first was done")
	}
}
