package machineupgrade_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/upgradecli"
)

// A PodDisruptionBudget that refuses the eviction of the only Pod on the
// Machine's Node holds the drain, and the status says so; once the budget
// is gone the drain finishes and the upgrade completes.
func TestPDBHoldsTheDrain(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	ms := fleet(t, ns, "pdb", 1)
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ms[0]), m)).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{NodeName: m.Status.NodeRef.Name, Containers: []corev1.Container{{Name: "db", Image: "db"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	// A Pod of another namespace on the Node is evicted too, and the
	// upgrade's Events (read in the Machines' namespace) do not name it.
	other := env.NewNamespace(t)
	foreign := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "payroll"},
		Spec: corev1.PodSpec{NodeName: m.Status.NodeRef.Name, Containers: []corev1.Container{{Name: "p", Image: "p"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	g.Expect(env.Client.Create(ctx, foreign)).To(Succeed())
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	g.Expect(env.Client.Create(ctx, pdb)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &policyv1.PodDisruptionBudget{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pdb), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Status.CurrentHealthy).To(BeEquivalentTo(1))
	}).WithTimeout(wait).Should(Succeed())

	u := newUpgrade(ns, "held", "pdb", 1)
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionFalse, upgradev1alpha1.DrainBlockedReason)
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ProgressingCondition, metav1.ConditionTrue, upgradev1alpha1.DrainBlockedReason)
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseUpgrading))
		g.Expect(u.Status.CurrentStep).To(Equal("pdb-0/Drain"))
		mp := u.Status.Machine("pdb-0")
		g.Expect(mp.Step).To(Equal(upgradev1alpha1.StepDrain))
		g.Expect(mp.StepState).To(Equal(upgradev1alpha1.StepStateRunning))
		g.Expect(mp.Message).To(ContainSubstring("a PodDisruptionBudget refuses the eviction of " + ns + "/db"))
		testenv.ExpectKstatus(ctx, g, env.Client, u, kstatus.InProgressStatus, upgradev1alpha1.DrainBlockedReason)
	})
	// Held: the machine is cordoned and not touched further.
	time.Sleep(2 * time.Second)
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
	g.Expect(m.Spec.Image).To(Equal("v1"))
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeTrue())

	g.Expect(env.Client.Delete(ctx, pdb)).To(Succeed())
	waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded))
		testenv.ExpectKstatus(ctx, g, env.Client, u, kstatus.CurrentStatus, "")
	})
	err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Pod was evicted: %v", err)
	g.Eventually(func(g Gomega) {
		evs := events(g, t, ns, "MachineUpgrade", u.Name)
		g.Expect(evs).To(ContainElement("Evicted: Machine pdb-0: evicted Pod " + ns + "/db from Node " + node.Name))
		g.Expect(evs).To(ContainElement("Evicted: Machine pdb-0: evicted Pod (a Pod of another namespace) from Node " + node.Name))
		for _, e := range evs {
			g.Expect(e).NotTo(Or(ContainSubstring(other), ContainSubstring(foreign.Name)), "an Event names another namespace's Pod")
		}
	}).WithTimeout(wait).Should(Succeed())
}

func ptrTo[T any](v T) *T { return &v }

// pauseMachine sets spec.paused on a Machine: its provider is no longer
// driven, so a power cycle never reaches it and it never comes back with
// the new image (as a machine whose new image does not boot).
func pauseMachine(t *testing.T, ns, name string, paused bool) {
	t.Helper()
	m := &machinev1alpha1.Machine{}
	g := NewWithT(t)
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
	base := m.DeepCopy()
	m.Spec.Paused = paused
	g.Expect(env.Client.Patch(t.Context(), m, client.MergeFrom(base))).To(Succeed())
}

// A Machine that never comes back fails WaitForBoot after its timeout, a
// bounded number of times, and the upgrade is Stalled naming the step and
// the Machine; the next Machine does not start. Once the machine is fixed,
// retry re-runs only the failed step (no second power cycle) and the
// upgrade completes.
func TestNeverComesBackThenRetry(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	fleet(t, ns, "r", 2)
	pauseMachine(t, ns, "r-0", true)
	u := newUpgrade(ns, "retry", "r", 1)
	u.Spec.Strategy.MaxAttempts = 2
	u.Spec.Timeouts.WaitForBoot = &metav1.Duration{Duration: 2 * time.Second}
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())

	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.StalledCondition, metav1.ConditionTrue, upgradev1alpha1.StepFailedReason)
		testenv.ExpectKstatus(ctx, g, env.Client, u, kstatus.FailedStatus, upgradev1alpha1.StepFailedReason)
	})
	testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionFalse, upgradev1alpha1.StepFailedReason)
	g.Expect(u.Status.Conditions).NotTo(ContainElement(HaveField("Type", upgradev1alpha1.ProgressingCondition)))
	g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseFailed))
	stalled := conditionMessage(u, upgradev1alpha1.StalledCondition)
	g.Expect(stalled).To(ContainSubstring("Machine r-0: step WaitForBoot failed 2 time(s): timed out after 2s"))
	mp := u.Status.Machine("r-0")
	g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineFailed))
	g.Expect(mp.Attempts).To(BeEquivalentTo(2))
	g.Expect(u.Status.Machine("r-1").State).To(Equal(upgradev1alpha1.MachinePending), "maxUnavailable 1: a failed machine holds its slot")
	// It stays Stalled: attempts are bounded.
	time.Sleep(3 * time.Second)
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Machine("r-0").Attempts).To(BeEquivalentTo(2))
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseFailed))
	})

	// Fix the machine; the BMC's power cycle reaches it and it boots v2.
	pauseMachine(t, ns, "r-0", false)
	relaxTimeouts(t, u)
	g.Expect(upgradecli.Retry(ctx, env.Client, ns, u.Name, time.Unix(0, 1))).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded))
	})
	g.Expect(u.Status.LastHandledRetry).To(Equal("1"))
	g.Expect(u.Status.Machine("r-0").Attempts).To(BeEquivalentTo(1), "the retry's first attempt succeeded")
	g.Expect(u.Status.Done).To(Equal("2/2"))
	g.Eventually(func(g Gomega) {
		g.Expect(redfishResets(g, t, ns, "r-0", "PowerCycle")).To(Equal(1), "retry re-ran WaitForBoot only")
		g.Expect(events(g, t, ns, "MachineUpgrade", u.Name)).To(ContainElement("Retry: Machine r-0: retrying WaitForBoot"))
	}).WithTimeout(wait).Should(Succeed())
}

// relaxTimeouts gives the next machines a boot timeout a loaded machine
// meets (the short one was for the machine that never comes back).
func relaxTimeouts(t *testing.T, u *upgradev1alpha1.MachineUpgrade) {
	t.Helper()
	g := NewWithT(t)
	got := &upgradev1alpha1.MachineUpgrade{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), got)).To(Succeed())
	base := got.DeepCopy()
	got.Spec.Timeouts.WaitForBoot = &metav1.Duration{Duration: time.Minute}
	g.Expect(env.Client.Patch(t.Context(), got, client.MergeFrom(base))).To(Succeed())
}

func conditionMessage(u *upgradev1alpha1.MachineUpgrade, typ string) string {
	for _, c := range u.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

// skip moves a Stalled upgrade on without the Machine that failed: it is
// Skipped with the reason, its Node is uncordoned (the machine runs), and
// the others are upgraded.
func TestSkipMovesOn(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	fleet(t, ns, "s", 2)
	pauseMachine(t, ns, "s-0", true)
	u := newUpgrade(ns, "skip", "s", 1)
	u.Spec.Strategy.MaxAttempts = 1
	u.Spec.Timeouts.WaitForBoot = &metav1.Duration{Duration: time.Second}
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.StalledCondition, metav1.ConditionTrue, upgradev1alpha1.StepFailedReason)
	})
	relaxTimeouts(t, u)
	g.Expect(upgradecli.Skip(ctx, env.Client, ns, u.Name, "s-0", "bad disk, ticket 42")).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded), "status %+v", u.Status)
	})
	mp := u.Status.Machine("s-0")
	g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineSkipped))
	g.Expect(mp.Message).To(ContainSubstring("bad disk, ticket 42"))
	g.Expect(mp.Message).To(ContainSubstring("uncordoned"))
	g.Expect(u.Status.Machine("s-1").State).To(Equal(upgradev1alpha1.MachineUpgraded))
	g.Expect(u.Status.Done).To(Equal("2/2"))
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s-0"}, m)).To(Succeed())
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse())
}

// Pre-checks that stay false hold every Machine untouched, then the upgrade
// is Stalled with ChecksFailed naming the check and the Machine.
func TestPreChecksHold(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	ms := fleet(t, ns, "pc", 1)
	u := newUpgrade(ns, "prechecks", "pc", 1)
	u.Spec.PreChecks = []upgradev1alpha1.Check{{Name: "on-version-9", Expression: `machine.spec.version == "9"`}}
	u.Spec.Strategy.MaxAttempts = 2
	u.Spec.Timeouts.Checks = &metav1.Duration{Duration: time.Second}
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.StalledCondition, metav1.ConditionTrue, upgradev1alpha1.ChecksFailedReason)
		testenv.ExpectKstatus(ctx, g, env.Client, u, kstatus.FailedStatus, upgradev1alpha1.ChecksFailedReason)
	})
	g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseFailed))
	g.Expect(conditionMessage(u, upgradev1alpha1.StalledCondition)).To(ContainSubstring("step PreChecks failed 2 time(s): timed out after 1s: check on-version-9 is false for Machine pc-0"))
	g.Expect(u.Status.Machines).To(BeEmpty(), "no Machine was started")
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ms[0]), m)).To(Succeed())
	g.Expect(m.Spec.Image).To(Equal("v1"))
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse())
}
