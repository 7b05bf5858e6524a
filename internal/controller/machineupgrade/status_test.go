package machineupgrade

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

func TestComputeStatus(t *testing.T) {
	step := func(name upgradev1alpha1.StepName, state upgradev1alpha1.StepState, attempts int32) upgradev1alpha1.StepStatus {
		return upgradev1alpha1.StepStatus{Name: name, State: state, Attempts: attempts, Message: string(name) + " message"}
	}
	machine := func(name string, state upgradev1alpha1.MachineState, st upgradev1alpha1.StepName, ss upgradev1alpha1.StepState) upgradev1alpha1.MachineProgress {
		return upgradev1alpha1.MachineProgress{Name: name, State: state, Step: st, StepState: ss, Attempts: 1, LastError: "boom"}
	}
	const (
		pre  = upgradev1alpha1.StepPreChecks
		ms   = upgradev1alpha1.StepMachines
		post = upgradev1alpha1.StepPostChecks
		ok   = upgradev1alpha1.StepStateSucceeded
		run  = upgradev1alpha1.StepStateRunning
		fail = upgradev1alpha1.StepStateFailed
	)
	tests := []struct {
		name       string
		spec       func(*upgradev1alpha1.MachineUpgradeSpec)
		status     upgradev1alpha1.MachineUpgradeStatus
		scope      scope
		phase      upgradev1alpha1.UpgradePhase
		reason     string
		msg        string
		current    string
		done       string
		stalled    bool
		progessing bool
	}{
		{name: "new", phase: upgradev1alpha1.PhasePending, reason: upgradev1alpha1.PendingReason, done: "0/0", progessing: true},
		{name: "pre-checks", status: upgradev1alpha1.MachineUpgradeStatus{Steps: []upgradev1alpha1.StepStatus{step(pre, run, 1)}},
			phase: upgradev1alpha1.PhasePreChecks, reason: upgradev1alpha1.RunningPreChecksReason, current: "PreChecks", done: "0/0", progessing: true},
		{name: "pre-checks failed for good", status: upgradev1alpha1.MachineUpgradeStatus{Steps: []upgradev1alpha1.StepStatus{step(pre, fail, 3)}},
			phase: upgradev1alpha1.PhaseFailed, reason: upgradev1alpha1.ChecksFailedReason, msg: "step PreChecks failed 3 time(s): PreChecks message", done: "0/0", stalled: true},
		{name: "upgrading", status: upgradev1alpha1.MachineUpgradeStatus{
			Steps:    []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, run, 1)},
			Machines: []upgradev1alpha1.MachineProgress{machine("a", upgradev1alpha1.MachineUpgraded, upgradev1alpha1.StepPostCheck, ok), machine("b", upgradev1alpha1.MachineUpgrading, upgradev1alpha1.StepDrain, run), machine("c", upgradev1alpha1.MachinePending, "", "")}},
			phase: upgradev1alpha1.PhaseUpgrading, reason: upgradev1alpha1.UpgradingReason, msg: "in flight: b/Drain", current: "b/Drain", done: "1/3", progessing: true},
		{name: "drain blocked", status: upgradev1alpha1.MachineUpgradeStatus{
			Steps:    []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, run, 1)},
			Machines: []upgradev1alpha1.MachineProgress{machine("b", upgradev1alpha1.MachineUpgrading, upgradev1alpha1.StepDrain, run)}},
			scope: scope{drainBlocked: []string{"Machine b: pdb"}},
			phase: upgradev1alpha1.PhaseUpgrading, reason: upgradev1alpha1.DrainBlockedReason, msg: "Machine b: pdb", current: "b/Drain", done: "0/1", progessing: true},
		{name: "waiting for the machine", status: upgradev1alpha1.MachineUpgradeStatus{
			Steps:    []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, run, 1)},
			Machines: []upgradev1alpha1.MachineProgress{machine("b", upgradev1alpha1.MachineUpgrading, upgradev1alpha1.StepWaitForBoot, run)}},
			scope: scope{waiting: []string{"Machine b: waiting for observed power Off"}},
			phase: upgradev1alpha1.PhaseUpgrading, reason: upgradev1alpha1.WaitingForMachineReason, msg: "Machine b: waiting for observed power Off", current: "b/WaitForBoot", done: "0/1", progessing: true},
		{name: "a machine failed for good", status: upgradev1alpha1.MachineUpgradeStatus{
			Steps:    []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, run, 1)},
			Machines: []upgradev1alpha1.MachineProgress{machine("b", upgradev1alpha1.MachineFailed, upgradev1alpha1.StepPowerCycle, fail)}},
			phase: upgradev1alpha1.PhaseFailed, reason: upgradev1alpha1.StepFailedReason, msg: "Machine b: step PowerCycle failed 1 time(s): boom", done: "0/1", stalled: true},
		{name: "paused between steps", spec: func(s *upgradev1alpha1.MachineUpgradeSpec) { s.Paused = true },
			status: upgradev1alpha1.MachineUpgradeStatus{
				Steps:    []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, run, 1)},
				Machines: []upgradev1alpha1.MachineProgress{machine("b", upgradev1alpha1.MachineUpgrading, upgradev1alpha1.StepDrain, ok)}},
			phase: upgradev1alpha1.PhasePaused, reason: upgradev1alpha1.PausedReason, current: "b/Drain", done: "0/1"},
		{name: "paused with a step in flight", spec: func(s *upgradev1alpha1.MachineUpgradeSpec) { s.Paused = true },
			status: upgradev1alpha1.MachineUpgradeStatus{
				Steps:    []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, run, 1)},
				Machines: []upgradev1alpha1.MachineProgress{machine("b", upgradev1alpha1.MachineUpgrading, upgradev1alpha1.StepDrain, run)}},
			phase: upgradev1alpha1.PhaseUpgrading, reason: upgradev1alpha1.UpgradingReason, current: "b/Drain", done: "0/1", progessing: true},
		{name: "post-checks", status: upgradev1alpha1.MachineUpgradeStatus{Steps: []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, ok, 1), step(post, run, 1)}},
			phase: upgradev1alpha1.PhasePostChecks, reason: upgradev1alpha1.RunningPostChecksReason, msg: "PostChecks message", current: "PostChecks", done: "0/0", progessing: true},
		{name: "succeeded", status: upgradev1alpha1.MachineUpgradeStatus{Steps: []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, ok, 1), step(post, ok, 1)},
			Machines: []upgradev1alpha1.MachineProgress{machine("a", upgradev1alpha1.MachineUpgraded, upgradev1alpha1.StepPostCheck, ok), machine("b", upgradev1alpha1.MachineSkipped, upgradev1alpha1.StepPowerCycle, fail)}},
			phase: upgradev1alpha1.PhaseSucceeded, reason: upgradev1alpha1.SucceededReason, msg: "2/2 Machine(s) upgraded or skipped to v2 2.0", done: "2/2"},
		{name: "aborting", spec: func(s *upgradev1alpha1.MachineUpgradeSpec) { s.Abort = true },
			status: upgradev1alpha1.MachineUpgradeStatus{
				Steps:    []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, run, 1)},
				Machines: []upgradev1alpha1.MachineProgress{machine("b", upgradev1alpha1.MachineUpgrading, upgradev1alpha1.StepWaitForBoot, run)}},
			phase: upgradev1alpha1.PhaseUpgrading, reason: upgradev1alpha1.UpgradingReason, msg: "aborting after the steps in flight: in flight: b/WaitForBoot", current: "b/WaitForBoot", done: "0/1", progessing: true},
		{name: "aborted", spec: func(s *upgradev1alpha1.MachineUpgradeSpec) { s.Abort = true },
			status: upgradev1alpha1.MachineUpgradeStatus{
				Steps:    []upgradev1alpha1.StepStatus{step(pre, ok, 1), step(ms, ok, 1)},
				Machines: []upgradev1alpha1.MachineProgress{machine("a", upgradev1alpha1.MachineUpgraded, upgradev1alpha1.StepPostCheck, ok), machine("b", upgradev1alpha1.MachineAborted, upgradev1alpha1.StepDrain, run)}},
			phase: upgradev1alpha1.PhaseAborted, reason: upgradev1alpha1.AbortedReason, msg: "aborted: 1 upgraded, 0 skipped, 1 left as status.machines says, 0 failed", done: "1/2", stalled: true},
		{name: "invalid", scope: scope{invalid: "spec.preChecks[x]: invalid CEL expression"},
			phase: upgradev1alpha1.PhaseFailed, reason: upgradev1alpha1.InvalidSpecReason, msg: "spec.preChecks[x]: invalid CEL expression", done: "0/0", stalled: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			u := &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Generation: 4},
				Spec: upgradev1alpha1.MachineUpgradeSpec{Image: "v2", Version: "2.0"}, Status: tc.status}
			if tc.spec != nil {
				tc.spec(&u.Spec)
			}
			s := tc.scope
			s.u, s.now = u, time.Now()
			computeStatus(&s)
			g.Expect(u.Status.Phase).To(Equal(tc.phase))
			ready := meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(tc.reason))
			g.Expect(ready.ObservedGeneration).To(BeEquivalentTo(4))
			g.Expect(ready.Status == metav1.ConditionTrue).To(Equal(tc.phase == upgradev1alpha1.PhaseSucceeded))
			if tc.msg != "" {
				g.Expect(ready.Message).To(Equal(tc.msg))
			}
			g.Expect(u.Status.CurrentStep).To(Equal(tc.current))
			g.Expect(u.Status.Done).To(Equal(tc.done))
			g.Expect(meta.IsStatusConditionTrue(u.Status.Conditions, upgradev1alpha1.StalledCondition)).To(Equal(tc.stalled))
			g.Expect(meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.StalledCondition) != nil).To(Equal(tc.stalled), "Stalled is present only while true")
			g.Expect(meta.IsStatusConditionTrue(u.Status.Conditions, upgradev1alpha1.ProgressingCondition)).To(Equal(tc.progessing))
			g.Expect(meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.ProgressingCondition) != nil).To(Equal(tc.progessing), "Progressing is present only while true")
		})
	}
}

func TestBackoff(t *testing.T) {
	g := NewWithT(t)
	g.Expect(backoff(1)).To(Equal(time.Second))
	g.Expect(backoff(2)).To(Equal(2 * time.Second))
	g.Expect(backoff(4)).To(Equal(8 * time.Second))
	g.Expect(backoff(30)).To(BeNumerically("<=", 10*time.Minute))
}
