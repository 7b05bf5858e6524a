package machineupgrade_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// Three KwokMachines, each with a MachineBMC, are upgraded from v1 to v2
// through Redfish: every Machine goes through every step once, its Node
// boots v2, and the Events tell the story.
func TestUpgradeThroughRedfish(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	ms := fleet(t, ns, "a", 3)
	u := newUpgrade(ns, "to-v2", "a", 1)
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())

	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded), "status %+v", u.Status)
	})
	testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionTrue, upgradev1alpha1.SucceededReason)
	g.Expect(u.Status.Done).To(Equal("3/3"))
	g.Expect(u.Status.ObservedGeneration).To(Equal(u.Generation))
	g.Expect(u.Status.Conditions).NotTo(ContainElement(HaveField("Type", upgradev1alpha1.StalledCondition)))
	g.Expect(u.Status.Conditions).NotTo(ContainElement(HaveField("Type", upgradev1alpha1.ProgressingCondition)))
	g.Expect(u.Status.Steps).To(HaveLen(3))
	for _, st := range u.Status.Steps {
		g.Expect(st.State).To(Equal(upgradev1alpha1.StepStateSucceeded), "step %s", st.Name)
		g.Expect(st.Attempts).To(BeEquivalentTo(1), "step %s", st.Name)
	}
	g.Expect(u.Status.Machines).To(HaveLen(3))
	for i, mp := range u.Status.Machines {
		g.Expect(mp.Name).To(Equal(ms[i].Name), "machines are in name order")
		g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineUpgraded))
		g.Expect(mp.Step).To(Equal(upgradev1alpha1.StepPostCheck))
		g.Expect(mp.StepState).To(Equal(upgradev1alpha1.StepStateSucceeded))
		g.Expect(mp.PreviousImage).To(Equal("v1"))
		g.Expect(mp.PreviousVersion).To(Equal("1.0"))
		g.Expect(mp.Started).NotTo(BeNil())
		g.Expect(mp.Finished).NotTo(BeNil())
		if i > 0 {
			// maxUnavailable 1: one after the other.
			g.Expect(mp.Started.Time).NotTo(BeTemporally("<", u.Status.Machines[i-1].Finished.Time))
		}
	}
	for _, m := range ms {
		got := &machinev1alpha1.Machine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
		g.Expect(got.Spec.Image).To(Equal("v2"))
		g.Expect(got.Spec.Version).To(Equal("2.0"))
		g.Expect(got.Spec.BootDevice).To(Equal(machinev1alpha1.BootNetwork))
		g.Expect(got.Spec.BootOnce).To(BeTrue())
		g.Expect(got.Status.PowerState).To(Equal(machinev1alpha1.PowerOn))
		node := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: got.Status.NodeRef.Name}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeFalse(), "uncordoned")
		g.Expect(node.Annotations).To(HaveKeyWithValue(upgradev1alpha1.BootedImageAnnotation, "v2"))
		g.Expect(node.Annotations).To(HaveKeyWithValue(upgradev1alpha1.BootedVersionAnnotation, "2.0"))
		g.Eventually(func(g Gomega) {
			g.Expect(redfishResets(g, t, ns, m.Name, "PowerCycle")).To(Equal(1), "one Redfish power cycle of %s", m.Name)
			ev := events(g, t, ns, "MachineUpgrade", u.Name)
			for _, step := range upgradev1alpha1.MachineSteps {
				g.Expect(ev).To(ContainElement("StepSucceeded: Machine "+m.Name+": "+string(step)+" done"), "Events %v", ev)
			}
			g.Expect(ev).To(ContainElement(HavePrefix("RedfishReset: Machine " + m.Name + ": Redfish ComputerSystem.Reset PowerCycle sent")))
		}).WithTimeout(wait).Should(Succeed())
	}

	// A finished upgrade has nothing to undo: it is deleted at once.
	g.Expect(u.Finalizers).To(ContainElement(upgradev1alpha1.MachineUpgradeFinalizer), "held since the first step")
	g.Expect(env.Client.Delete(ctx, u)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), &upgradev1alpha1.MachineUpgrade{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the MachineUpgrade is gone: %v", err)
	}).WithTimeout(wait).Should(Succeed())
}

// The samples (Machine worker-1, its MachineBMC and the MachineUpgrade
// workers-to-2.0) work as they are, applied with kubectl.
func TestSample(t *testing.T) {
	ns := need(t)
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"machine_v1alpha1_machine.yaml", "bmc_v1alpha1_machinebmc.yaml", "upgrade_v1alpha1_machineupgrade.yaml"} {
		out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "kubectl"), "--kubeconfig", env.KubeconfigPath,
			"apply", "-n", ns, "-f", filepath.Join("..", "..", "..", "config", "samples", f)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", f, err, out)
		}
	}
	u := waitUpgrade(t, &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workers-to-2.0"}},
		func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
			g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded), "status %+v", u.Status)
		})
	NewWithT(t).Expect(u.Status.Done).To(Equal("1/1"))
	m := &machinev1alpha1.Machine{}
	NewWithT(t).Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "worker-1"}, m)).To(Succeed())
	NewWithT(t).Expect(m.Spec.Image).To(Equal("busybox"))
	NewWithT(t).Expect(m.Spec.Version).To(Equal("2.0"))
}
