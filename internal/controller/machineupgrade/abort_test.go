package machineupgrade_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// An abort while the second of three Machines is held in its drain leaves
// a defined state: the first stays upgraded, the second is uncordoned and
// keeps its old image, the third is not touched; the upgrade is Aborted.
func TestAbortMidway(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	ms := fleet(t, ns, "ab", 3)
	second := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ms[1]), second)).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{NodeName: second.Status.NodeRef.Name, Containers: []corev1.Container{{Name: "db", Image: "db"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	})).To(Succeed())

	u := newUpgrade(ns, "abort", "ab", 1)
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Machines).To(HaveLen(3))
		g.Expect(u.Status.Machine("ab-0").State).To(Equal(upgradev1alpha1.MachineUpgraded))
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionFalse, upgradev1alpha1.DrainBlockedReason)
		g.Expect(u.Status.CurrentStep).To(Equal("ab-1/Drain"))
	})

	base := u.DeepCopy()
	u.Spec.Abort = true
	g.Expect(env.Client.Patch(ctx, u, client.MergeFrom(base))).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseAborted), "status %+v", u.Status)
	})
	testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionFalse, upgradev1alpha1.AbortedReason)
	g.Expect(u.Status.Conditions).NotTo(ContainElement(HaveField("Type", upgradev1alpha1.ProgressingCondition)))
	// Final until the spec changes: Stalled, which a waiting Sync (kstatus)
	// reads Failed at once rather than waiting for its timeout.
	testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.StalledCondition, metav1.ConditionTrue, upgradev1alpha1.AbortedReason)
	g.Eventually(func(g Gomega) {
		testenv.ExpectKstatus(ctx, g, env.Client, u, kstatus.FailedStatus, upgradev1alpha1.AbortedReason)
	}).Should(Succeed())
	g.Expect(u.Status.Done).To(Equal("1/3"))
	g.Expect(u.Status.Machine("ab-0").State).To(Equal(upgradev1alpha1.MachineUpgraded))
	mp := u.Status.Machine("ab-1")
	g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineAborted))
	g.Expect(mp.Message).To(ContainSubstring("aborted during Drain"))
	g.Expect(mp.Message).To(ContainSubstring("uncordoned"))
	g.Expect(u.Status.Machine("ab-2").State).To(Equal(upgradev1alpha1.MachineAborted))
	g.Expect(u.Status.Machine("ab-2").Message).To(ContainSubstring("not changed"))
	g.Expect(u.Status.Step(upgradev1alpha1.StepPostChecks).State).To(Equal(upgradev1alpha1.StepStateSkipped))

	want := map[string]string{"ab-0": "v2", "ab-1": "v1", "ab-2": "v1"}
	for name, image := range want {
		m := &machinev1alpha1.Machine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
		g.Expect(m.Spec.Image).To(Equal(image), name)
		node := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeFalse(), "%s's Node is schedulable", name)
	}
}
