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
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/machineupgrade"
	"github.com/converge-dev/converge/internal/testenv"
)

// holdDrain puts a Pod on node that a PodDisruptionBudget keeps there: an
// upgrade's drain of node waits (DrainBlocked) until the budget is gone.
func holdDrain(t *testing.T, ns, node string) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(env.Client.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "db", Image: "db"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	})).To(Succeed())
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
}

// deleteHeldUpgrade starts an upgrade of the one Machine of pool, waits
// until its drain is held with the Node cordoned (and the finalizer on the
// upgrade), deletes the upgrade and waits until it is gone. It returns the
// Machine's Node and the upgrade's progress of the Machine as it was held.
func deleteHeldUpgrade(t *testing.T, ns, pool string, cordonFirst bool) (*corev1.Node, upgradev1alpha1.MachineProgress) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	ms := fleet(t, ns, pool, 1)
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ms[0]), m)).To(Succeed())
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse())
	if cordonFirst {
		// Someone (a person's kubectl cordon) cordoned it before.
		base := node.DeepCopy()
		node.Spec.Unschedulable = true
		g.Expect(env.Client.Patch(ctx, node, client.MergeFrom(base))).To(Succeed())
	}
	holdDrain(t, ns, node.Name)

	u := newUpgrade(ns, "del", pool, 1)
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionFalse, upgradev1alpha1.DrainBlockedReason)
		g.Expect(u.Status.CurrentStep).To(Equal(pool + "-0/Drain"))
	})
	g.Expect(u.Finalizers).To(ContainElement(upgradev1alpha1.MachineUpgradeFinalizer))
	held := *u.Status.Machine(pool + "-0")
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeTrue(), "cordoned while the drain is held")

	g.Expect(env.Client.Delete(ctx, u)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), &upgradev1alpha1.MachineUpgrade{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the MachineUpgrade is gone: %v", err)
	}).WithTimeout(wait).Should(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
	g.Expect(m.Spec.Image).To(Equal("v1"), "the image is not changed")
	g.Expect(redfishResets(g, t, ns, m.Name, "PowerCycle")).To(BeZero(), "never power cycled")
	return node, held
}

// Deleting an upgrade held in the drain of its Machine takes back the
// upgrade's cordon (the machine runs), records a Deleted Event saying so,
// and then lets the MachineUpgrade go (the finalizer is removed).
func TestDeleteMidwayUncordons(t *testing.T) {
	ns := need(t)
	node, held := deleteHeldUpgrade(t, ns, "dm", false)
	g := NewWithT(t)
	g.Expect(held.CordonedBy).To(Equal(upgradev1alpha1.CordonedByUpgrade))
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "uncordoned by the deletion")
	g.Eventually(func(g Gomega) {
		g.Expect(events(g, t, ns, "MachineUpgrade", "del")).To(ContainElement(
			machineupgrade.EventDeleted + ": Machine dm-0: deleted after step Drain (Running): not changed; Node " + node.Name + " uncordoned"))
	}).WithTimeout(wait).Should(Succeed())
}

// A Node cordoned before the upgrade started is not the upgrade's to
// uncordon: deleting the upgrade mid-way leaves it cordoned, and the
// Deleted Event says why.
func TestDeleteLeavesAnotherCordon(t *testing.T) {
	ns := need(t)
	node, held := deleteHeldUpgrade(t, ns, "do", true)
	g := NewWithT(t)
	g.Expect(held.CordonedBy).To(Equal(upgradev1alpha1.CordonedByOther))
	g.Expect(node.Spec.Unschedulable).To(BeTrue(), "still cordoned after the deletion")
	g.Eventually(func(g Gomega) {
		g.Expect(events(g, t, ns, "MachineUpgrade", "del")).To(ContainElement(
			machineupgrade.EventDeleted + ": Machine do-0: deleted after step Drain (Running): not changed; Node " + node.Name + " left cordoned (it was cordoned before the upgrade)"))
	}).WithTimeout(wait).Should(Succeed())
}

// An abort leaves a Node cordoned before the upgrade started cordoned too
// (the abort and the deletion share the code that leaves a Machine).
func TestAbortLeavesAnotherCordon(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	ms := fleet(t, ns, "ao", 1)
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ms[0]), m)).To(Succeed())
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
	base := node.DeepCopy()
	node.Spec.Unschedulable = true
	g.Expect(env.Client.Patch(ctx, node, client.MergeFrom(base))).To(Succeed())
	holdDrain(t, ns, node.Name)

	u := newUpgrade(ns, "abort", "ao", 1)
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.CurrentStep).To(Equal("ao-0/Drain"))
	})
	ub := u.DeepCopy()
	u.Spec.Abort = true
	g.Expect(env.Client.Patch(ctx, u, client.MergeFrom(ub))).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseAborted), "status %+v", u.Status)
	})
	g.Expect(u.Status.Machine("ao-0").Message).To(HaveSuffix("Node " + node.Name + " left cordoned (it was cordoned before the upgrade)"))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeTrue(), "still cordoned after the abort")
}

// After its Uncordon step a cordon is not the upgrade's: a Node cordoned
// again (by someone else) while the upgrade waits in the Machine's
// PostCheck stays cordoned when the upgrade is deleted.
func TestDeleteAfterUncordonLeavesTheNode(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	ms := fleet(t, ns, "dp", 1)
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ms[0]), m)).To(Succeed())
	base := m.DeepCopy()
	m.Labels["hold"] = "true"
	g.Expect(env.Client.Patch(ctx, m, client.MergeFrom(base))).To(Succeed())

	u := newUpgrade(ns, "del", "dp", 1)
	u.Spec.PostChecks = append(u.Spec.PostChecks, upgradev1alpha1.Check{Name: "not-held", Expression: `!("hold" in machine.metadata.labels)`})
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.CurrentStep).To(Equal("dp-0/PostCheck"))
		g.Expect(u.Status.Machine("dp-0").Message).To(ContainSubstring("check not-held is false"))
	})
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "uncordoned by the Uncordon step")
	nb := node.DeepCopy()
	node.Spec.Unschedulable = true
	g.Expect(env.Client.Patch(ctx, node, client.MergeFrom(nb))).To(Succeed())

	g.Expect(env.Client.Delete(ctx, u)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), &upgradev1alpha1.MachineUpgrade{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the MachineUpgrade is gone: %v", err)
	}).WithTimeout(wait).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(events(g, t, ns, "MachineUpgrade", "del")).To(ContainElement(
			machineupgrade.EventDeleted + ": Machine dp-0: deleted after step PostCheck (Running): power cycled into v2 2.0"))
	}).WithTimeout(wait).Should(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeTrue(), "the cordon made after the upgrade's uncordon stays")
}

// Deleting a Stalled upgrade leaves its Failed Machine as an abort would
// (it was power cycled: nothing is put back) and does not touch the
// Pending one.
func TestDeleteStalled(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	fleet(t, ns, "ds", 2)
	pauseMachine(t, ns, "ds-0", true)
	u := newUpgrade(ns, "del", "ds", 1)
	u.Spec.Strategy.MaxAttempts = 1
	u.Spec.Timeouts.WaitForBoot = &metav1.Duration{Duration: time.Second}
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.StalledCondition, metav1.ConditionTrue, upgradev1alpha1.StepFailedReason)
	})
	g.Expect(u.Status.Machine("ds-0").State).To(Equal(upgradev1alpha1.MachineFailed))
	g.Expect(u.Status.Machine("ds-1").State).To(Equal(upgradev1alpha1.MachinePending))
	g.Expect(env.Client.Delete(ctx, u)).To(Succeed())
	gone(t, u)
	g.Eventually(func(g Gomega) {
		g.Expect(events(g, t, ns, "MachineUpgrade", u.Name)).To(ContainElement(
			HavePrefix(machineupgrade.EventDeleted + ": Machine ds-0: deleted after step WaitForBoot (Failed): power cycled into v2 2.0; Node ")))
	}).WithTimeout(wait).Should(Succeed())
	g.Expect(events(g, t, ns, "MachineUpgrade", u.Name)).NotTo(ContainElement(HavePrefix(machineupgrade.EventDeleted+": Machine ds-1:")), "the Pending Machine is not visited")
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ds-1"}, m)).To(Succeed())
	g.Expect(m.Spec.Image).To(Equal("v1"))
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse())
}
