package machineupgrade_test

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/upgradecli"
)

// pause (through the CLI's verb) takes effect between steps: the step in
// flight finishes, no other starts, the phase is Paused; resume completes
// the upgrade.
func TestPauseBetweenSteps(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	fleet(t, ns, "p", 2)
	u := newUpgrade(ns, "pause", "p", 1)
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(running(u, upgradev1alpha1.StepCordon) || running(u, upgradev1alpha1.StepDrain) || running(u, upgradev1alpha1.StepSetImage)).To(BeTrue())
	})
	g.Expect(upgradecli.Pause(ctx, env.Client, ns, u.Name)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhasePaused))
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionFalse, upgradev1alpha1.PausedReason)
	})
	g.Expect(u.Status.Conditions).NotTo(ContainElement(HaveField("Type", upgradev1alpha1.ProgressingCondition)))
	// Where the pause caught the upgrade depends on how fast the machines
	// went (a KwokMachine can finish all its steps in a second): whatever
	// step was in flight finished, and nothing moves while paused.
	snapshot := func(u *upgradev1alpha1.MachineUpgrade) map[string]string {
		out := map[string]string{}
		for _, m := range u.Status.Machines {
			out[m.Name] = string(m.State) + "/" + string(m.Step) + "/" + string(m.StepState)
		}
		return out
	}
	held := snapshot(u)
	for _, m := range u.Status.Machines {
		if m.State == upgradev1alpha1.MachineUpgrading {
			g.Expect(m.StepState).To(Equal(upgradev1alpha1.StepStateSucceeded), "the step in flight of %s finished", m.Name)
		}
	}
	time.Sleep(2 * time.Second)
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(snapshot(u)).To(Equal(held), "no new step while paused")
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhasePaused))
	})

	g.Expect(upgradecli.Resume(ctx, env.Client, ns, u.Name)).To(Succeed())
	waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded))
	})
}

// converge upgrade status prints the steps, the Machines and one timeline
// of the Events of the upgrade, its Machines (the BMC's resets) and more.
func TestStatusCommand(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	fleet(t, ns, "st", 1)
	u := newUpgrade(ns, "status", "st", 1)
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded))
	})
	g.Eventually(func(g Gomega) {
		var out bytes.Buffer
		g.Expect(upgradecli.Status(ctx, env.Client, &out, ns, u.Name, 0, time.Now())).To(Succeed())
		s := out.String()
		g.Expect(s).To(ContainSubstring("MachineUpgrade " + ns + "/status: Succeeded to v2 2.0, 1/1 done"))
		g.Expect(s).To(MatchRegexp(`(?m)^PreChecks\s+Succeeded\s+1\s`))
		g.Expect(s).To(MatchRegexp(`(?m)^st-0\s+Upgraded\s+PostCheck\s+Succeeded\s+1\s+v1 1.0\s`))
		// The BMC's Event on the Machine and the upgrade's own, merged.
		g.Expect(s).To(MatchRegexp(`BMCPower\s+Machine/st-0\s+Redfish ComputerSystem.Reset PowerCycle`))
		g.Expect(s).To(MatchRegexp(`StepSucceeded\s+MachineUpgrade/status \(Machine/st-0\)\s+Machine st-0: WaitForBoot done`))
	}).WithTimeout(wait).Should(Succeed())
}
