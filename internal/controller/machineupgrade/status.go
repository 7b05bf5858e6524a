package machineupgrade

import (
	"fmt"
	"strings"

	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// computeStatus derives phase, done, currentStep and the conditions from
// the checkpoints and this reconcile's observations. It is pure.
func computeStatus(s *scope) {
	u := s.u
	st := &u.Status
	gen := u.Generation

	n, total := 0, len(st.Machines)
	var current, stalled []string
	upgrading, pending, stepsRunning := 0, 0, 0
	for _, mp := range st.Machines {
		switch mp.State {
		case upgradev1alpha1.MachinePending:
			pending++
		case upgradev1alpha1.MachineUpgraded, upgradev1alpha1.MachineSkipped:
			n++
		case upgradev1alpha1.MachineUpgrading:
			upgrading++
			if mp.StepState == upgradev1alpha1.StepStateRunning {
				stepsRunning++
			}
			current = append(current, mp.Name+"/"+string(mp.Step))
		case upgradev1alpha1.MachineFailed:
			stalled = append(stalled, fmt.Sprintf("Machine %s: step %s failed %d time(s): %s", mp.Name, mp.Step, mp.Attempts, mp.LastError))
		}
	}
	st.Done = fmt.Sprintf("%d/%d", n, total)

	stepState := func(name upgradev1alpha1.StepName) upgradev1alpha1.StepState {
		if x := st.Step(name); x != nil {
			return x.State
		}
		return upgradev1alpha1.StepStatePending
	}
	var checksFailed []string
	for _, x := range st.Steps {
		if x.State == upgradev1alpha1.StepStateRunning && x.Name != upgradev1alpha1.StepMachines {
			current = append([]string{string(x.Name)}, current...)
		}
		if x.State == upgradev1alpha1.StepStateFailed && x.Attempts >= maxAttempts(u) {
			checksFailed = append(checksFailed, fmt.Sprintf("step %s failed %d time(s): %s", x.Name, x.Attempts, x.Message))
		}
	}
	st.CurrentStep = creconcile.Truncate(strings.Join(current, ","), creconcile.MaxMessageBytes)

	pre, ms, post := stepState(upgradev1alpha1.StepPreChecks), stepState(upgradev1alpha1.StepMachines), stepState(upgradev1alpha1.StepPostChecks)
	running := pre == upgradev1alpha1.StepStateRunning || post == upgradev1alpha1.StepStateRunning || upgrading > 0

	var phase upgradev1alpha1.UpgradePhase
	var reason, msg string
	switch {
	case s.invalid != "":
		phase, reason, msg = upgradev1alpha1.PhaseFailed, upgradev1alpha1.InvalidSpecReason, s.invalid
	case s.overlap != "":
		phase, reason, msg = upgradev1alpha1.PhasePending, upgradev1alpha1.WaitingForUpgradeReason, s.overlap
	case post == upgradev1alpha1.StepStateSucceeded:
		phase, reason, msg = upgradev1alpha1.PhaseSucceeded, upgradev1alpha1.SucceededReason,
			fmt.Sprintf("%s Machine(s) upgraded or skipped to %s %s", st.Done, u.Spec.Image, u.Spec.Version)
	case u.Spec.Abort && !running && pending == 0:
		phase, reason, msg = upgradev1alpha1.PhaseAborted, upgradev1alpha1.AbortedReason, abortSummary(st)
	case len(stalled) > 0:
		phase, reason, msg = upgradev1alpha1.PhaseFailed, upgradev1alpha1.StepFailedReason, strings.Join(stalled, "; ")
	case len(checksFailed) > 0:
		phase, reason, msg = upgradev1alpha1.PhaseFailed, upgradev1alpha1.ChecksFailedReason, strings.Join(checksFailed, "; ")
	case u.Spec.Paused && stepsRunning == 0 && pre != upgradev1alpha1.StepStateRunning && post != upgradev1alpha1.StepStateRunning:
		phase, reason, msg = upgradev1alpha1.PhasePaused, upgradev1alpha1.PausedReason, "spec.paused is set: no new step starts"
	case len(s.drainBlocked) > 0:
		phase, reason, msg = upgradev1alpha1.PhaseUpgrading, upgradev1alpha1.DrainBlockedReason, strings.Join(s.drainBlocked, "; ")
	case len(s.waiting) > 0:
		phase, reason, msg = upgradev1alpha1.PhaseUpgrading, upgradev1alpha1.WaitingForMachineReason, strings.Join(s.waiting, "; ")
	case post == upgradev1alpha1.StepStateRunning || post == upgradev1alpha1.StepStateFailed || ms == upgradev1alpha1.StepStateSucceeded:
		phase, reason, msg = upgradev1alpha1.PhasePostChecks, upgradev1alpha1.RunningPostChecksReason, stepMessage(st, upgradev1alpha1.StepPostChecks)
	case ms == upgradev1alpha1.StepStateRunning:
		phase, reason, msg = upgradev1alpha1.PhaseUpgrading, upgradev1alpha1.UpgradingReason, "in flight: "+orNone(strings.Join(current, ", "))
	case pre == upgradev1alpha1.StepStateRunning || pre == upgradev1alpha1.StepStateFailed:
		phase, reason, msg = upgradev1alpha1.PhasePreChecks, upgradev1alpha1.RunningPreChecksReason, stepMessage(st, upgradev1alpha1.StepPreChecks)
	default:
		phase, reason, msg = upgradev1alpha1.PhasePending, upgradev1alpha1.PendingReason, "not started"
	}
	if u.Spec.Abort && running && reason != upgradev1alpha1.StepFailedReason {
		msg = "aborting after the steps in flight: " + msg
	}
	msg = creconcile.Truncate(msg, creconcile.MaxMessageBytes)
	st.Phase = phase
	if phase == upgradev1alpha1.PhaseSucceeded {
		creconcile.MarkTrue(&st.Conditions, gen, upgradev1alpha1.ReadyCondition, reason, msg)
	} else {
		creconcile.MarkFalse(&st.Conditions, gen, upgradev1alpha1.ReadyCondition, reason, msg)
	}
	switch phase {
	case upgradev1alpha1.PhaseFailed, upgradev1alpha1.PhaseAborted:
		// Final until a person changes the spec: Stalled, so that kstatus
		// (a waiting Sync) reads it Failed rather than in progress for ever.
		creconcile.MarkTrue(&st.Conditions, gen, upgradev1alpha1.StalledCondition, reason, msg)
		creconcile.Remove(&st.Conditions, upgradev1alpha1.ProgressingCondition)
	case upgradev1alpha1.PhaseSucceeded, upgradev1alpha1.PhasePaused:
		creconcile.Remove(&st.Conditions, upgradev1alpha1.StalledCondition)
		creconcile.Remove(&st.Conditions, upgradev1alpha1.ProgressingCondition)
	default:
		creconcile.Remove(&st.Conditions, upgradev1alpha1.StalledCondition)
		creconcile.MarkTrue(&st.Conditions, gen, upgradev1alpha1.ProgressingCondition, reason, msg)
	}
}

func stepMessage(st *upgradev1alpha1.MachineUpgradeStatus, name upgradev1alpha1.StepName) string {
	if x := st.Step(name); x != nil && x.Message != "" {
		return x.Message
	}
	return string(name)
}

func abortSummary(st *upgradev1alpha1.MachineUpgradeStatus) string {
	counts := map[upgradev1alpha1.MachineState]int{}
	for _, mp := range st.Machines {
		counts[mp.State]++
	}
	return fmt.Sprintf("aborted: %d upgraded, %d skipped, %d left as status.machines says, %d failed",
		counts[upgradev1alpha1.MachineUpgraded], counts[upgradev1alpha1.MachineSkipped], counts[upgradev1alpha1.MachineAborted], counts[upgradev1alpha1.MachineFailed])
}
