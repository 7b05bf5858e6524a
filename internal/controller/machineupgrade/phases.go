package machineupgrade

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/upgradecheck"
	"github.com/converge-dev/converge/internal/upgradeoverlap"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

func metav1LabelSelectorAsSelector(u *upgradev1alpha1.MachineUpgrade) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(&u.Spec.Selector)
}

func maxAttempts(u *upgradev1alpha1.MachineUpgrade) int32 {
	if u.Spec.Strategy.MaxAttempts > 0 {
		return u.Spec.Strategy.MaxAttempts
	}
	return DefaultMaxAttempts
}

func maxUnavailable(u *upgradev1alpha1.MachineUpgrade) int {
	if u.Spec.Strategy.MaxUnavailable > 0 {
		return int(u.Spec.Strategy.MaxUnavailable)
	}
	return 1
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return def
	}
	return d.Duration
}

// timeout is the bound of a step; zero for the steps that are one write.
func timeout(u *upgradev1alpha1.MachineUpgrade, step upgradev1alpha1.StepName) time.Duration {
	t := u.Spec.Timeouts
	switch step {
	case upgradev1alpha1.StepDrain:
		return durationOr(t.Drain, DefaultDrainTimeout)
	case upgradev1alpha1.StepPowerCycle:
		return durationOr(t.PowerCycle, DefaultPowerCycleTimeout)
	case upgradev1alpha1.StepWaitForBoot:
		return durationOr(t.WaitForBoot, DefaultWaitForBootTimeout)
	case upgradev1alpha1.StepPostCheck, upgradev1alpha1.StepPreChecks, upgradev1alpha1.StepPostChecks:
		return durationOr(t.Checks, DefaultChecksTimeout)
	}
	return 0
}

// backoff is the wait after the attempts-th failed attempt.
func backoff(attempts int32) time.Duration {
	d := backoffBase
	for i := int32(1); i < attempts && d < 5*time.Minute; i++ {
		d *= 2
	}
	return d
}

func (r *Reconciler) event(s *scope, related runtime.Object, typ, reason, action, format string, args ...any) {
	r.Recorder.Eventf(s.u, related, typ, reason, action, format, args...)
}

// reconcileNormal handles the verbs, then moves the upgrade on.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) error {
	u := s.u
	if u.Finished() {
		return nil
	}
	checks, err := compileChecks(u)
	if err != nil {
		s.invalid = err.Error()
		return reconcile.TerminalError(err)
	}
	if _, err := selectorOf(u); err != nil {
		s.invalid = err.Error()
		return reconcile.TerminalError(err)
	}
	if wait, err := r.waitForOverlap(ctx, s); err != nil || wait {
		return err
	}
	if err := r.handleRetry(ctx, s); err != nil {
		return err
	}
	if err := r.handleSkips(ctx, s); err != nil {
		return err
	}

	for _, name := range []upgradev1alpha1.StepName{upgradev1alpha1.StepPreChecks, upgradev1alpha1.StepMachines, upgradev1alpha1.StepPostChecks} {
		ensureStep(u, name)
	}
	// Step pointers are looked up again after each checkpoint: a write
	// replaces u's status with the server's.
	pre := u.Status.Step(upgradev1alpha1.StepPreChecks)
	if pre.State != upgradev1alpha1.StepStateSucceeded && pre.State != upgradev1alpha1.StepStateSkipped {
		if u.Spec.Abort && pre.State != upgradev1alpha1.StepStateRunning {
			return r.abortAll(ctx, s)
		}
		done, err := r.clusterChecks(ctx, s, upgradev1alpha1.StepPreChecks, checks.pre)
		if err != nil || !done {
			return err
		}
	}
	ms := u.Status.Step(upgradev1alpha1.StepMachines)
	if ms.State != upgradev1alpha1.StepStateSucceeded && ms.State != upgradev1alpha1.StepStateSkipped {
		done, err := r.rollMachines(ctx, s, checks.post)
		if err != nil || !done {
			return err
		}
	}
	post := u.Status.Step(upgradev1alpha1.StepPostChecks)
	if post.State != upgradev1alpha1.StepStateSucceeded && post.State != upgradev1alpha1.StepStateSkipped {
		if u.Spec.Abort && post.State != upgradev1alpha1.StepStateRunning {
			post.State, post.Message = upgradev1alpha1.StepStateSkipped, "aborted"
			return r.checkpoint(ctx, s)
		}
		if _, err := r.clusterChecks(ctx, s, upgradev1alpha1.StepPostChecks, checks.post); err != nil {
			return err
		}
	}
	return nil
}

// waitForOverlap applies the admission rule again, for what admission
// cannot see (two MachineUpgrades admitted at the same moment, one stored
// without the webhook): while u has touched no Machine, it reads the
// MachineUpgrades of its namespace from the API server and, when another
// unfinished one shares a Machine and goes first (upgradeoverlap.GoesFirst),
// u waits (WaitingForUpgrade, naming it) and gives back what it holds: its
// claim on the Machines and its pre-checks, which are evaluated again when
// the way is free. Once u has started a Machine it never waits for another.
func (r *Reconciler) waitForOverlap(ctx context.Context, s *scope) (bool, error) {
	u := s.u
	if u.Spec.Abort || upgradeoverlap.Started(u) {
		return false, nil
	}
	others := &upgradev1alpha1.MachineUpgradeList{}
	if err := r.APIReader.List(ctx, others, client.InNamespace(u.Namespace)); err != nil {
		return false, fmt.Errorf("listing MachineUpgrades for overlaps: %w", err)
	}
	if len(others.Items) < 2 {
		return false, nil
	}
	ms, err := r.selected(ctx, s)
	if err != nil {
		return false, err
	}
	c := upgradeoverlap.Blocking(u, others.Items, ms)
	if c == nil {
		return false, nil
	}
	s.overlap = "waiting: " + c.Message()
	u.Status.Machines, u.Status.Steps = nil, nil
	return true, nil
}

// compiled is a check ready to run: a CEL program or a console regexp.
type compiled struct {
	name    string
	prg     *upgradecheck.Program
	console *regexp.Regexp
}

// compile compiles one check; field names it in the error.
func compile(c upgradev1alpha1.Check, field string) (compiled, error) {
	if c.Console != "" {
		re, err := regexp.Compile(c.Console)
		if err != nil {
			return compiled{}, fmt.Errorf("%s.console: %w", field, err)
		}
		return compiled{name: c.Name, console: re}, nil
	}
	p, err := upgradecheck.Compile(c.Expression)
	if err != nil {
		return compiled{}, fmt.Errorf("%s.expression: %w", field, err)
	}
	return compiled{name: c.Name, prg: p}, nil
}

type checkSet struct{ pre, post []compiled }

func compileChecks(u *upgradev1alpha1.MachineUpgrade) (checkSet, error) {
	var cs checkSet
	for _, c := range u.Spec.PreChecks {
		if c.Console != "" {
			return cs, fmt.Errorf("spec.preChecks[%s].console: a console check is a post-check only", c.Name)
		}
		p, err := compile(c, "spec.preChecks["+c.Name+"]")
		if err != nil {
			return cs, err
		}
		cs.pre = append(cs.pre, p)
	}
	for _, c := range u.Spec.PostChecks {
		p, err := compile(c, "spec.postChecks["+c.Name+"]")
		if err != nil {
			return cs, err
		}
		cs.post = append(cs.post, p)
	}
	return cs, nil
}

// ensureStep returns the upgrade's step name, adding it Pending.
func ensureStep(u *upgradev1alpha1.MachineUpgrade, name upgradev1alpha1.StepName) *upgradev1alpha1.StepStatus {
	if st := u.Status.Step(name); st != nil {
		return st
	}
	u.Status.Steps = append(u.Status.Steps, upgradev1alpha1.StepStatus{Name: name, State: upgradev1alpha1.StepStatePending})
	return u.Status.Step(name)
}

// clusterChecks runs PreChecks or PostChecks over every selected Machine.
func (r *Reconciler) clusterChecks(ctx context.Context, s *scope, name upgradev1alpha1.StepName, checks []compiled) (bool, error) {
	u := s.u
	st := u.Status.Step(name)
	switch st.State {
	case upgradev1alpha1.StepStatePending, "":
		if u.Spec.Paused {
			return false, nil
		}
		st.State, st.Attempts, st.Started, st.Message = upgradev1alpha1.StepStateRunning, 1, now(s), ""
		if err := r.checkpoint(ctx, s); err != nil {
			return false, err
		}
	case upgradev1alpha1.StepStateFailed:
		if st.Attempts >= maxAttempts(u) {
			return false, nil // Stalled: a retry moves it on
		}
		if st.NextAttempt != nil && s.now.Before(st.NextAttempt.Time) {
			s.requeueAfter(st.NextAttempt.Sub(s.now))
			return false, nil
		}
		if u.Spec.Paused {
			return false, nil
		}
		st.State, st.Started, st.NextAttempt = upgradev1alpha1.StepStateRunning, now(s), nil
		st.Attempts++
		if err := r.checkpoint(ctx, s); err != nil {
			return false, err
		}
	}
	st = u.Status.Step(name)
	machines, err := r.selected(ctx, s)
	if err != nil {
		return false, err
	}
	if name == upgradev1alpha1.StepPostChecks {
		// The cluster post-checks are about the Machines upgraded.
		kept := machines[:0]
		for _, m := range machines {
			if mp := u.Status.Machine(m.Name); mp == nil || mp.State == upgradev1alpha1.MachineUpgraded {
				kept = append(kept, m)
			}
		}
		machines = kept
	}
	why := ""
	for i := range machines {
		ok, msg, err := r.evalChecks(ctx, &machines[i], u.Status.Machine(machines[i].Name), checks)
		var ce *consoleError
		if errors.As(err, &ce) {
			// A console that cannot be read here: false until the step's
			// timeout, saying why.
			ok, msg, err = false, ce.Error(), nil
		}
		if err != nil {
			return false, err
		}
		if !ok {
			why = msg
			break
		}
	}
	if why == "" {
		st.State, st.Finished, st.Message, st.NextAttempt = upgradev1alpha1.StepStateSucceeded, now(s), fmt.Sprintf("%d check(s) true for %d Machine(s)", len(checks), len(machines)), nil
		r.event(s, nil, corev1.EventTypeNormal, EventStepSucceeded, string(st.Name), "%s passed: %s", st.Name, st.Message)
		return true, r.checkpoint(ctx, s)
	}
	st.Message = why
	if s.now.Sub(st.Started.Time) > timeout(u, st.Name) {
		st.State = upgradev1alpha1.StepStateFailed
		st.Message = fmt.Sprintf("timed out after %s: %s", timeout(u, st.Name), why)
		st.NextAttempt = &metav1.Time{Time: s.now.Add(backoff(st.Attempts))}
		r.event(s, nil, corev1.EventTypeWarning, EventStepFailed, string(st.Name), "%s failed (attempt %d of %d): %s", st.Name, st.Attempts, maxAttempts(u), st.Message)
		return false, r.checkpoint(ctx, s)
	}
	s.requeueAfter(poll)
	return false, nil
}

// consoleError is a console check that could not read the console.
type consoleError struct{ err error }

func (e *consoleError) Error() string { return e.err.Error() }
func (e *consoleError) Unwrap() error { return e.err }

// evalChecks evaluates checks against m, its Node and (console checks) its
// console since the mark in mp (nil: the whole console); msg names the
// first false one. A console that cannot be read is a *consoleError.
func (r *Reconciler) evalChecks(ctx context.Context, m *machinev1alpha1.Machine, mp *upgradev1alpha1.MachineProgress, checks []compiled) (bool, string, error) {
	if len(checks) == 0 {
		return true, "", nil
	}
	mu, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		return false, "", err
	}
	var nu map[string]any
	if node, _, err := r.machineNode(ctx, m); err != nil {
		return false, "", err
	} else if node != nil {
		if nu, err = runtime.DefaultUnstructuredConverter.ToUnstructured(node); err != nil {
			return false, "", err
		}
	}
	for _, c := range checks {
		if c.console != nil {
			ok, msg, err := r.evalConsole(ctx, m, mp, c)
			if err != nil {
				return false, "", &consoleError{err}
			}
			if !ok {
				return false, msg, nil
			}
			continue
		}
		ok, err := c.prg.Eval(mu, nu)
		if err != nil {
			return false, fmt.Sprintf("check %s on Machine %s: %v", c.name, m.Name, err), nil
		}
		if !ok {
			return false, fmt.Sprintf("check %s is false for Machine %s", c.name, m.Name), nil
		}
	}
	return true, "", nil
}

// selected lists the Machines of the upgrade: those in status.machines
// once the set is fixed, else those the selector picks, in upgrade order.
func (r *Reconciler) selected(ctx context.Context, s *scope) ([]machinev1alpha1.Machine, error) {
	u := s.u
	sel, err := selectorOf(u)
	if err != nil {
		return nil, err
	}
	l := &machinev1alpha1.MachineList{}
	if err := r.List(ctx, l, client.InNamespace(u.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing Machines: %w", err)
	}
	key := u.Spec.Strategy.OrderByLabel
	sort.Slice(l.Items, func(i, j int) bool {
		a, b := l.Items[i], l.Items[j]
		if key != "" && a.Labels[key] != b.Labels[key] {
			return a.Labels[key] < b.Labels[key]
		}
		return a.Name < b.Name
	})
	if len(u.Status.Machines) == 0 {
		return l.Items, nil
	}
	var out []machinev1alpha1.Machine
	for _, m := range l.Items {
		if u.Status.Machine(m.Name) != nil {
			out = append(out, m)
		}
	}
	return out, nil
}

func now(s *scope) *metav1.Time { return &metav1.Time{Time: s.now} }

// rollMachines fixes the set of Machines, moves every Machine in flight
// on, and starts new ones while fewer than maxUnavailable are in flight.
func (r *Reconciler) rollMachines(ctx context.Context, s *scope, post []compiled) (bool, error) {
	u := s.u
	st := u.Status.Step(upgradev1alpha1.StepMachines)
	if st.State == upgradev1alpha1.StepStatePending || st.State == "" {
		if u.Spec.Paused {
			return false, nil
		}
		machines, err := r.selected(ctx, s)
		if err != nil {
			return false, err
		}
		u.Status.Machines = nil
		for _, m := range machines {
			u.Status.Machines = append(u.Status.Machines, upgradev1alpha1.MachineProgress{
				Name: m.Name, State: upgradev1alpha1.MachinePending,
				PreviousImage: m.Spec.Image, PreviousVersion: m.Spec.Version,
			})
		}
		st.State, st.Started, st.Attempts = upgradev1alpha1.StepStateRunning, now(s), 1
		if err := r.checkpoint(ctx, s); err != nil {
			return false, err
		}
		// The next reconcile reads the others again (waitForOverlap) after
		// this claim and before any Machine is touched: of two upgrades
		// that claimed the same Machines at the same moment, the one that
		// goes second gives its claim back there.
		s.requeueAfter(0)
		return false, nil
	}
	for i := range u.Status.Machines {
		mp := &u.Status.Machines[i]
		if mp.State != upgradev1alpha1.MachineUpgrading {
			continue
		}
		if err := r.advance(ctx, s, mp.Name, post); err != nil {
			return false, err
		}
	}
	// Start new Machines.
	for !u.Spec.Paused && !u.Spec.Abort {
		inFlight, next := 0, -1
		var lastFinished time.Time
		for i, mp := range u.Status.Machines {
			switch mp.State {
			case upgradev1alpha1.MachineUpgrading, upgradev1alpha1.MachineFailed:
				inFlight++
			case upgradev1alpha1.MachinePending:
				if next < 0 {
					next = i
				}
			case upgradev1alpha1.MachineUpgraded:
				if mp.Finished != nil && mp.Finished.After(lastFinished) {
					lastFinished = mp.Finished.Time
				}
			}
		}
		if next < 0 || inFlight >= maxUnavailable(u) {
			break
		}
		if p := u.Spec.Strategy.PauseBetweenMachines; p != nil && !lastFinished.IsZero() && s.now.Sub(lastFinished) < p.Duration {
			s.requeueAfter(p.Duration - s.now.Sub(lastFinished))
			break
		}
		mp := &u.Status.Machines[next]
		mp.State, mp.Started = upgradev1alpha1.MachineUpgrading, now(s)
		if err := r.advance(ctx, s, mp.Name, post); err != nil {
			return false, err
		}
	}
	if u.Spec.Abort {
		for i := range u.Status.Machines {
			mp := &u.Status.Machines[i]
			if mp.State == upgradev1alpha1.MachinePending {
				mp.State, mp.Finished, mp.Message = upgradev1alpha1.MachineAborted, now(s), "aborted before it started; not changed"
			}
		}
	}
	for _, mp := range u.Status.Machines {
		switch mp.State {
		case upgradev1alpha1.MachineUpgraded, upgradev1alpha1.MachineSkipped, upgradev1alpha1.MachineAborted:
		default:
			return false, r.checkpoint(ctx, s)
		}
	}
	st = u.Status.Step(upgradev1alpha1.StepMachines)
	st.State, st.Finished = upgradev1alpha1.StepStateSucceeded, now(s)
	st.Message = "every Machine upgraded, skipped or aborted"
	if u.Spec.Abort {
		st.Message = "aborted"
		post := u.Status.Step(upgradev1alpha1.StepPostChecks)
		post.State, post.Message = upgradev1alpha1.StepStateSkipped, "aborted"
	}
	return !u.Spec.Abort, r.checkpoint(ctx, s)
}

func stepIndex(step upgradev1alpha1.StepName) int {
	for i, s := range upgradev1alpha1.MachineSteps {
		if s == step {
			return i
		}
	}
	return -1
}

// advance moves one Machine on by as many steps as are done now. Each step
// is checkpointed Running before its side effect and Succeeded or Failed
// after it.
func (r *Reconciler) advance(ctx context.Context, s *scope, name string, post []compiled) error {
	u := s.u
	for {
		mp := u.Status.Machine(name)
		switch mp.StepState {
		case "", upgradev1alpha1.StepStateSucceeded:
			i := stepIndex(mp.Step) + 1
			if mp.Step == "" {
				i = 0
			}
			if i >= len(upgradev1alpha1.MachineSteps) {
				mp.State, mp.Finished, mp.Message = upgradev1alpha1.MachineUpgraded, now(s), fmt.Sprintf("upgraded to %s %s", u.Spec.Image, u.Spec.Version)
				return r.checkpoint(ctx, s)
			}
			// Between steps: a pause holds here; an abort leaves the Machine
			// unless it has been power cycled (then it comes back and is
			// uncordoned and checked: it runs the new image).
			if u.Spec.Abort && i <= stepIndex(upgradev1alpha1.StepPowerCycle) {
				return r.leave(ctx, s, name, "aborted")
			}
			if u.Spec.Paused {
				return nil
			}
			mp.Step, mp.StepState, mp.Attempts, mp.StepStarted, mp.NextAttempt, mp.LastError, mp.Message =
				upgradev1alpha1.MachineSteps[i], upgradev1alpha1.StepStateRunning, 1, now(s), nil, "", ""
			if err := r.checkpoint(ctx, s); err != nil {
				return err
			}
			s.startedHere[name] = true
		case upgradev1alpha1.StepStateFailed:
			if mp.Attempts >= maxAttempts(u) {
				if u.Spec.Abort {
					return r.leave(ctx, s, name, "aborted after step "+string(mp.Step)+" failed")
				}
				if mp.State != upgradev1alpha1.MachineFailed {
					mp.State = upgradev1alpha1.MachineFailed
					return r.checkpoint(ctx, s)
				}
				return nil // Stalled: retry, skip or abort moves it on
			}
			if u.Spec.Abort {
				return r.leave(ctx, s, name, "aborted after step "+string(mp.Step)+" failed")
			}
			if mp.NextAttempt != nil && s.now.Before(mp.NextAttempt.Time) {
				s.requeueAfter(mp.NextAttempt.Sub(s.now))
				return nil
			}
			if u.Spec.Paused {
				return nil
			}
			mp.State, mp.StepState, mp.StepStarted, mp.NextAttempt = upgradev1alpha1.MachineUpgrading, upgradev1alpha1.StepStateRunning, now(s), nil
			mp.Attempts++
			if err := r.checkpoint(ctx, s); err != nil {
				return err
			}
			s.startedHere[name] = true
		case upgradev1alpha1.StepStateRunning:
			// Resumed, or a step that waits: run it (again; every step but
			// the power cycle is idempotent, and that one checks first).
			// An abort does not wait for a drain or a post-check, which may
			// wait long and have changed nothing; a machine booting the new
			// image is waited for.
			if u.Spec.Abort && (mp.Step == upgradev1alpha1.StepDrain || mp.Step == upgradev1alpha1.StepPostCheck) {
				return r.leave(ctx, s, name, "aborted during "+string(mp.Step))
			}
		default:
			return nil
		}

		mp = u.Status.Machine(name)
		done, msg, err := r.runStep(ctx, s, mp, post)
		mp = u.Status.Machine(name) // runStep may have checkpointed
		if err == nil && !done {
			if t := timeout(u, mp.Step); t > 0 && s.now.Sub(mp.StepStarted.Time) > t {
				err = fmt.Errorf("timed out after %s: %s", t, msg)
			}
		}
		if err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			mp.StepState, mp.LastError, mp.Message = upgradev1alpha1.StepStateFailed, creconcile.Truncate(err.Error(), creconcile.MaxMessageBytes), ""
			mp.NextAttempt = &metav1.Time{Time: s.now.Add(backoff(mp.Attempts))}
			if mp.Attempts >= maxAttempts(u) {
				mp.State = upgradev1alpha1.MachineFailed
			}
			r.event(s, r.machineRef(ctx, u, name), corev1.EventTypeWarning, EventStepFailed, string(mp.Step),
				"Machine %s: %s failed (attempt %d of %d): %s", name, mp.Step, mp.Attempts, maxAttempts(u), err)
			s.requeueAfter(backoff(mp.Attempts))
			return r.checkpoint(ctx, s)
		}
		if !done {
			mp.Message = creconcile.Truncate(msg, creconcile.MaxMessageBytes)
			s.requeueAfter(poll)
			return nil
		}
		mp.StepState, mp.Message, mp.LastError = upgradev1alpha1.StepStateSucceeded, "", ""
		r.event(s, r.machineRef(ctx, u, name), corev1.EventTypeNormal, EventStepSucceeded, string(mp.Step), "Machine %s: %s done", name, mp.Step)
		if err := r.checkpoint(ctx, s); err != nil {
			return err
		}
	}
}

// machineRef is the Machine name (from the cache), as an Event's related
// object, or nil.
func (r *Reconciler) machineRef(ctx context.Context, u *upgradev1alpha1.MachineUpgrade, name string) runtime.Object {
	m := &machinev1alpha1.Machine{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: name}, m); err != nil {
		return nil
	}
	return m
}

// whyDeleted is leave's why when the upgrade is being deleted.
const whyDeleted = "deleted"

// leave stops upgrading a Machine (abort, skip or deletion) in a defined
// state: an image written but not yet booted is put back, and a cordon of
// the upgrade's own (ownCordon) is taken back if the machine runs. It is
// marked Aborted (or Skipped) with what was left in the message and an
// Event (Aborted, Skipped or Deleted). It never resets a machine.
func (r *Reconciler) leave(ctx context.Context, s *scope, name, why string) error {
	u := s.u
	mp := u.Status.Machine(name)
	m := &machinev1alpha1.Machine{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: name}, m); err != nil && !apierrors.IsNotFound(err) {
		return err
	} else if err == nil {
		done := stepIndex(mp.Step)
		if mp.StepState != upgradev1alpha1.StepStateSucceeded {
			done--
		}
		left := "not changed"
		if done >= stepIndex(upgradev1alpha1.StepSetImage) && done < stepIndex(upgradev1alpha1.StepPowerCycle) {
			if err := r.patchMachineSpec(ctx, m, mp.PreviousImage, mp.PreviousVersion, machinev1alpha1.BootDisk, false); err != nil {
				return err
			}
			left = fmt.Sprintf("spec put back to %s %s (it was never power cycled)", mp.PreviousImage, mp.PreviousVersion)
		} else if done >= stepIndex(upgradev1alpha1.StepPowerCycle) {
			left = "power cycled into " + u.Spec.Image + " " + u.Spec.Version
		}
		node, _, err := r.machineNode(ctx, m)
		if err != nil {
			return err
		}
		switch {
		case node == nil || !inCordon(mp):
		case !ownCordon(mp):
			if node.Spec.Unschedulable {
				whose := "it was cordoned before the upgrade"
				if mp.CordonedBy == "" {
					whose = "whether the upgrade cordoned it was not recorded"
				}
				left += "; Node " + node.Name + " left cordoned (" + whose + ")"
			}
		case m.Status.PowerState == machinev1alpha1.PowerOn:
			// Read uncached: a cordon written a moment ago may not be in the
			// cache yet, and uncordon writes only what differs.
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
				return fmt.Errorf("reading Node %s: %w", node.Name, err)
			}
			if _, err := uncordon(ctx, r.Client, node); err != nil {
				return err
			}
			left += "; Node " + node.Name + " uncordoned"
		default:
			left += "; Node " + node.Name + " left cordoned (the machine is not running)"
		}
		mp.Message = creconcile.Truncate(why+" after step "+string(mp.Step)+" ("+string(mp.StepState)+"): "+left, creconcile.MaxMessageBytes)
	} else {
		mp.Message = creconcile.Truncate(why+" after step "+string(mp.Step)+" ("+string(mp.StepState)+"): the Machine is gone", creconcile.MaxMessageBytes)
	}
	mp.Finished = now(s)
	switch {
	case strings.HasPrefix(why, "skipped"):
		mp.State = upgradev1alpha1.MachineSkipped
		r.event(s, r.machineRef(ctx, u, name), corev1.EventTypeNormal, EventSkipped, "Skip", "Machine %s: %s", name, mp.Message)
	case why == whyDeleted:
		mp.State = upgradev1alpha1.MachineAborted
		r.event(s, r.machineRef(ctx, u, name), corev1.EventTypeNormal, EventDeleted, "Delete", "Machine %s: %s", name, mp.Message)
	default:
		mp.State = upgradev1alpha1.MachineAborted
		r.event(s, r.machineRef(ctx, u, name), corev1.EventTypeNormal, EventAborted, "Abort", "Machine %s: %s", name, mp.Message)
	}
	return r.checkpoint(ctx, s)
}

// inCordon reports whether the Machine is between its cordon and its
// uncordon: the Cordon step started (its write may be done) and the
// Uncordon step has not succeeded.
func inCordon(mp *upgradev1alpha1.MachineProgress) bool {
	i := stepIndex(mp.Step)
	if i < stepIndex(upgradev1alpha1.StepCordon) {
		return false
	}
	return i < stepIndex(upgradev1alpha1.StepUncordon) || (mp.Step == upgradev1alpha1.StepUncordon && mp.StepState != upgradev1alpha1.StepStateSucceeded)
}

// ownCordon reports whether the Machine's Node may carry this upgrade's
// cordon, not yet taken back: it is inCordon and the Node was schedulable
// when the Cordon step started (recorded before the cordon was written, so
// a cordon written just before the manager stopped counts). Progress
// recorded before cordonedBy existed counts a Cordon step that succeeded.
func ownCordon(mp *upgradev1alpha1.MachineProgress) bool {
	if !inCordon(mp) {
		return false
	}
	switch mp.CordonedBy {
	case upgradev1alpha1.CordonedByOther:
		return false
	case upgradev1alpha1.CordonedByUpgrade:
		return true
	}
	return mp.Step != upgradev1alpha1.StepCordon || mp.StepState == upgradev1alpha1.StepStateSucceeded
}

// abortAll ends an upgrade aborted before any Machine was touched.
func (r *Reconciler) abortAll(ctx context.Context, s *scope) error {
	u := s.u
	for _, name := range []upgradev1alpha1.StepName{upgradev1alpha1.StepPreChecks, upgradev1alpha1.StepMachines, upgradev1alpha1.StepPostChecks} {
		st := ensureStep(u, name)
		if st.State != upgradev1alpha1.StepStateSucceeded {
			st.State, st.Message = upgradev1alpha1.StepStateSkipped, "aborted"
		}
	}
	for i := range u.Status.Machines {
		if mp := &u.Status.Machines[i]; mp.State == upgradev1alpha1.MachinePending {
			mp.State, mp.Finished, mp.Message = upgradev1alpha1.MachineAborted, now(s), "aborted before it started; not changed"
		}
	}
	return r.checkpoint(ctx, s)
}

// handleRetry acts on a new value of the retry annotation: the failed step
// of each failed Machine (and failed checks) gets fresh attempts.
func (r *Reconciler) handleRetry(ctx context.Context, s *scope) error {
	u := s.u
	v, ok := u.Annotations[upgradev1alpha1.RetryAnnotation]
	if !ok || v == u.Status.LastHandledRetry {
		return nil
	}
	u.Status.LastHandledRetry = v
	for i := range u.Status.Steps {
		if st := &u.Status.Steps[i]; st.State == upgradev1alpha1.StepStateFailed {
			st.Attempts, st.NextAttempt = 0, nil
			r.event(s, nil, corev1.EventTypeNormal, EventRetry, "Retry", "Retrying %s", st.Name)
		}
	}
	for i := range u.Status.Machines {
		mp := &u.Status.Machines[i]
		if mp.State == upgradev1alpha1.MachineFailed && mp.StepState == upgradev1alpha1.StepStateFailed {
			mp.State, mp.Attempts, mp.NextAttempt = upgradev1alpha1.MachineUpgrading, 0, nil
			r.event(s, r.machineRef(ctx, u, mp.Name), corev1.EventTypeNormal, EventRetry, "Retry", "Machine %s: retrying %s", mp.Name, mp.Step)
		}
	}
	return r.checkpoint(ctx, s)
}

// handleSkips marks each Machine named by a skip annotation Skipped, once
// no step of it is running.
func (r *Reconciler) handleSkips(ctx context.Context, s *scope) error {
	u := s.u
	for k, reason := range u.Annotations {
		name, ok := strings.CutPrefix(k, upgradev1alpha1.SkipAnnotationPrefix)
		if !ok {
			continue
		}
		mp := u.Status.Machine(name)
		if mp == nil {
			continue
		}
		switch {
		case mp.State == upgradev1alpha1.MachinePending:
			mp.State, mp.Finished, mp.Message = upgradev1alpha1.MachineSkipped, now(s), "skipped before it started: "+reason
			r.event(s, r.machineRef(ctx, u, name), corev1.EventTypeNormal, EventSkipped, "Skip", "Machine %s: %s", name, mp.Message)
			if err := r.checkpoint(ctx, s); err != nil {
				return err
			}
		case mp.State == upgradev1alpha1.MachineFailed,
			mp.State == upgradev1alpha1.MachineUpgrading && mp.StepState != upgradev1alpha1.StepStateRunning:
			if err := r.leave(ctx, s, name, "skipped ("+reason+")"); err != nil {
				return err
			}
		}
	}
	return nil
}
