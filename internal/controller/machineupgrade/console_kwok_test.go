package machineupgrade_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// A console post-check on a KwokMachine, whose provider keeps no serial
// console, cannot be evaluated: the Machine's PostCheck step fails at once
// with a message saying why (not after its timeout), its attempts are
// bounded, and the upgrade is Stalled naming the Machine, the step and the
// reason. No console mark is recorded at its power cycle.
func TestConsoleCheckWithoutConsole(t *testing.T) {
	ns := need(t)
	g := NewWithT(t)
	ctx := t.Context()
	fleet(t, ns, "nc", 1)
	u := newUpgrade(ns, "no-console", "nc", 1)
	u.Spec.Strategy.MaxAttempts = 2
	u.Spec.PostChecks = []upgradev1alpha1.Check{{Name: "booted-v2", Console: `^converge-image: v2$`}}
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.StalledCondition, metav1.ConditionTrue, upgradev1alpha1.StepFailedReason)
	})
	g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseFailed))
	const why = "console check booted-v2 cannot read the console of Machine nc-0: machine nc-0: its provider keeps no serial console (status.consoleLog is empty)"
	g.Expect(conditionMessage(u, upgradev1alpha1.StalledCondition)).To(Equal("Machine nc-0: step PostCheck failed 2 time(s): " + why))
	mp := u.Status.Machine("nc-0")
	g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineFailed))
	g.Expect(mp.Step).To(Equal(upgradev1alpha1.StepPostCheck))
	g.Expect(mp.Attempts).To(BeEquivalentTo(2))
	g.Expect(mp.LastError).To(Equal(why))
	g.Expect(mp.ConsoleOffset).To(BeNil(), "no console to mark")
	g.Expect(mp.ConsoleDigest).To(BeEmpty())
}
