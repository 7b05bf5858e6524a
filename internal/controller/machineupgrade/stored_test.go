package machineupgrade_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/machineupgrade"
	"github.com/converge-dev/converge/internal/testenv"
)

// stored writes, with no controller running, a MachineUpgrade of the one
// Machine of pool whose status says the Machine is in step (stepState,
// cordonedBy) and whose Node is cordoned: the state a manager stopped at
// that point leaves (or, with cordonedBy empty, one stored before
// cordonedBy existed). finalizers are set as given. It returns the upgrade
// and the Machine's Node.
func stored(t *testing.T, ns, pool string, step upgradev1alpha1.StepName, stepState upgradev1alpha1.StepState, by upgradev1alpha1.CordonedBy, finalizers []string) (*upgradev1alpha1.MachineUpgrade, *corev1.Node) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	name := pool + "-0"
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
	base := node.DeepCopy()
	node.Spec.Unschedulable = true
	g.Expect(env.Client.Patch(ctx, node, client.MergeFrom(base))).To(Succeed())

	u := newUpgrade(ns, "stored", pool, 1)
	u.Finalizers = finalizers
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	u.Status = upgradev1alpha1.MachineUpgradeStatus{
		Phase: upgradev1alpha1.PhaseUpgrading,
		Steps: []upgradev1alpha1.StepStatus{
			{Name: upgradev1alpha1.StepPreChecks, State: upgradev1alpha1.StepStateSucceeded, Attempts: 1, Started: &at, Finished: &at},
			{Name: upgradev1alpha1.StepMachines, State: upgradev1alpha1.StepStateRunning, Attempts: 1, Started: &at},
			{Name: upgradev1alpha1.StepPostChecks, State: upgradev1alpha1.StepStatePending},
		},
		Machines: []upgradev1alpha1.MachineProgress{{
			Name: name, State: upgradev1alpha1.MachineUpgrading, Step: step, StepState: stepState, StepStarted: &at, Attempts: 1,
			PreviousImage: "v1", PreviousVersion: "1.0", Started: &at, CordonedBy: by,
		}},
	}
	g.Expect(env.Client.Status().Update(ctx, u)).To(Succeed())
	return u, node
}

// storedFleet makes the namespace and the one Machine of pool with the
// controllers, then stops them; start runs them again.
func storedFleet(t *testing.T, pool string) (ns string, start func()) {
	t.Helper()
	testenv.Need(t, env)
	ns = env.NewNamespace(t)
	stop := startManager(t)
	fleet(t, ns, pool, 1)
	NewWithT(t).Expect(stop()).To(Succeed())
	return ns, func() { startManager(t) }
}

func gone(t *testing.T, u *upgradev1alpha1.MachineUpgrade) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), &upgradev1alpha1.MachineUpgrade{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the MachineUpgrade is gone: %v", err)
	}).WithTimeout(wait).Should(Succeed())
}

// A manager stopped after it wrote the cordon and before it checkpointed
// the Cordon step Succeeded: the resumed step keeps the record made before
// the cordon (Upgrade), though it finds the Node cordoned.
func TestResumedCordonKeepsItsRecord(t *testing.T) {
	ns, start := storedFleet(t, "rc")
	u, _ := stored(t, ns, "rc", upgradev1alpha1.StepCordon, upgradev1alpha1.StepStateRunning, upgradev1alpha1.CordonedByUpgrade, nil)
	start()
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded), "status %+v", u.Status)
	})
	NewWithT(t).Expect(u.Status.Machine("rc-0").CordonedBy).To(Equal(upgradev1alpha1.CordonedByUpgrade))
}

// The same state, deleted before a manager runs again: the cordon may be
// the upgrade's (recorded before it was written), so the deletion takes it
// back.
func TestDeleteInTheCordonWindow(t *testing.T) {
	ns, start := storedFleet(t, "cw")
	u, node := stored(t, ns, "cw", upgradev1alpha1.StepCordon, upgradev1alpha1.StepStateRunning, upgradev1alpha1.CordonedByUpgrade,
		[]string{upgradev1alpha1.MachineUpgradeFinalizer})
	g := NewWithT(t)
	g.Expect(env.Client.Delete(t.Context(), u)).To(Succeed())
	start()
	gone(t, u)
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(node), node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "uncordoned by the deletion")
	g.Eventually(func(g Gomega) {
		g.Expect(events(g, t, ns, "MachineUpgrade", u.Name)).To(ContainElement(
			machineupgrade.EventDeleted + ": Machine cw-0: deleted after step Cordon (Running): not changed; Node " + node.Name + " uncordoned"))
	}).WithTimeout(wait).Should(Succeed())
}

// An unfinished upgrade stored before the finalizer and cordonedBy existed
// (held in its drain) gets the finalizer on its next reconcile; deleting it
// then takes back the cordon of its Cordon step that succeeded.
func TestDeleteStoredBeforeTheFinalizer(t *testing.T) {
	ns, start := storedFleet(t, "sb")
	m := &machinev1alpha1.Machine{}
	g := NewWithT(t)
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "sb-0"}, m)).To(Succeed())
	holdDrain(t, ns, m.Status.NodeRef.Name)
	u, node := stored(t, ns, "sb", upgradev1alpha1.StepDrain, upgradev1alpha1.StepStateRunning, "", nil)
	start()
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Finalizers).To(ContainElement(upgradev1alpha1.MachineUpgradeFinalizer))
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionFalse, upgradev1alpha1.DrainBlockedReason)
	})
	g.Expect(env.Client.Delete(t.Context(), u)).To(Succeed())
	gone(t, u)
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(node), node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "uncordoned by the deletion")
	g.Eventually(func(g Gomega) {
		g.Expect(events(g, t, ns, "MachineUpgrade", u.Name)).To(ContainElement(
			machineupgrade.EventDeleted + ": Machine sb-0: deleted after step Drain (Running): not changed; Node " + node.Name + " uncordoned"))
	}).WithTimeout(wait).Should(Succeed())
}

// Deleted in stored states, before a manager runs again: the cordon is
// taken back only while it may be the upgrade's.
func TestDeleteStoredStates(t *testing.T) {
	tests := []struct {
		name       string
		step       upgradev1alpha1.StepName
		stepState  upgradev1alpha1.StepState
		by         upgradev1alpha1.CordonedBy
		uncordoned bool
		left       string // the Deleted Event's end; %s is the Node
	}{
		// The uncordon may not be written yet: written now.
		{"Uncordon running", upgradev1alpha1.StepUncordon, upgradev1alpha1.StepStateRunning, upgradev1alpha1.CordonedByUpgrade, true,
			"deleted after step Uncordon (Running): power cycled into v2 2.0; Node %s uncordoned"},
		// The uncordon was written: a cordon since is someone else's.
		{"Uncordon succeeded", upgradev1alpha1.StepUncordon, upgradev1alpha1.StepStateSucceeded, upgradev1alpha1.CordonedByUpgrade, false,
			"deleted after step Uncordon (Succeeded): power cycled into v2 2.0"},
		// Stored before cordonedBy: a cordon whose step did not succeed may
		// be someone else's, and is left.
		{"Cordon running stored before cordonedBy", upgradev1alpha1.StepCordon, upgradev1alpha1.StepStateRunning, "", false,
			"deleted after step Cordon (Running): not changed; Node %s left cordoned (whether the upgrade cordoned it was not recorded)"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := "ss" + string(rune('a'+i))
			ns, start := storedFleet(t, pool)
			u, node := stored(t, ns, pool, tt.step, tt.stepState, tt.by, []string{upgradev1alpha1.MachineUpgradeFinalizer})
			g := NewWithT(t)
			g.Expect(env.Client.Delete(t.Context(), u)).To(Succeed())
			start()
			gone(t, u)
			left := tt.left
			if strings.Contains(left, "%s") {
				left = fmt.Sprintf(left, node.Name)
			}
			g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(node), node)).To(Succeed())
			g.Expect(node.Spec.Unschedulable).To(Equal(!tt.uncordoned))
			g.Eventually(func(g Gomega) {
				g.Expect(events(g, t, ns, "MachineUpgrade", u.Name)).To(ContainElement(
					machineupgrade.EventDeleted + ": Machine " + pool + "-0: " + left))
			}).WithTimeout(wait).Should(Succeed())
		})
	}
}
