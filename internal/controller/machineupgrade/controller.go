// Package machineupgrade implements the MachineUpgrade controller: a
// resumable state machine that rolls the Machines a MachineUpgrade selects
// to a new image and version, at most maxUnavailable at a time, through
// checkpointed steps: pre-checks, then per Machine cordon, drain (Eviction
// API), set image, power cycle through the Machine's MachineBMC over
// Redfish, wait for boot, uncordon, post-check, then cluster post-checks.
//
// Every step is written to the status before it runs (state Running, with
// an optimistic lock on the resourceVersion, so that two reconciles can
// never both start it) and after it finished (Succeeded or Failed). A
// manager killed at any point resumes from the status: a finished step is
// never run again, and the one step that is not idempotent (the power
// cycle) looks for the evidence of a reset it may have sent before sending
// another.
package machineupgrade

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the controller's name.
const ControllerName = "machineupgrade"

// FieldManager is the field manager of the controller's writes.
const FieldManager = "converge-machineupgrade"

// Defaults of the spec's optional fields.
const (
	DefaultMaxAttempts        = 3
	DefaultDrainTimeout       = 10 * time.Minute
	DefaultPowerCycleTimeout  = 30 * time.Second
	DefaultWaitForBootTimeout = 10 * time.Minute
	DefaultChecksTimeout      = 5 * time.Minute
	// DefaultBootKick is how long WaitForBoot lets a Machine stay off
	// (asked Off and observed Off: a power cycle whose BMC stopped between
	// the off and the on) before it powers it on through Redfish.
	DefaultBootKick = 10 * time.Second
	// backoffBase is the wait before the second attempt; it doubles.
	backoffBase = time.Second
	// poll is how often a waiting step looks again (the Machine watch
	// usually comes first).
	poll = time.Second
)

// Event reasons, on the MachineUpgrade (the related object is the Machine,
// Node or Pod concerned).
const (
	EventStepSucceeded = "StepSucceeded"
	EventStepFailed    = "StepFailed"
	EventEvicted       = "Evicted"
	EventReset         = "RedfishReset"
	EventSkipped       = "Skipped"
	EventAborted       = "Aborted"
	EventRetry         = "Retry"
	// EventDeleted: the upgrade was deleted mid-way; the note says what
	// was left of the Machine (as an abort leaves it).
	EventDeleted = "Deleted"
)

// +kubebuilder:rbac:groups=upgrade.converge.dev,resources=machineupgrades,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=upgrade.converge.dev,resources=machineupgrades/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=bmc.converge.dev,resources=machinebmcs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler reconciles MachineUpgrades.
type Reconciler struct {
	client.Client
	// APIReader reads uncached: the MachineUpgrade at the start of each
	// reconcile, Pods during a drain, the Machine around its power cycle,
	// the BMC's Secret.
	APIReader client.Reader
	// Recorder records Events.
	Recorder events.EventRecorder
	// BMCCASecret is the Secret, in the manager's namespace, keeping the
	// CA of the BMCs' Redfish certificates: the default HTTPClient trusts
	// that CA alone, read from there (never from a MachineBMC's status,
	// which is only a copy).
	BMCCASecret types.NamespacedName
	// HTTPClient talks Redfish to the BMCs; when nil, a client that
	// verifies each BMC's certificate against the CA of BMCCASecret and
	// the endpoint's host (newRedfishHTTPClient) before it sends anything.
	HTTPClient *http.Client
	// Console reads the Machines' serial consoles for the console
	// post-checks; LocalConsole (this host's files) when nil.
	Console ConsoleReader
	// BootKick; DefaultBootKick when zero.
	BootKick time.Duration
	// Now; time.Now when nil.
	Now func() time.Time

	// bmcTrust keeps the pool of the BMC CA for the default HTTPClient.
	bmcTrust     *bmc.CATrust
	bmcTrustOnce sync.Once
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	if r.HTTPClient == nil {
		r.HTTPClient = r.newRedfishHTTPClient()
	}
	if r.Console == nil {
		r.Console = LocalConsole{}
	}
	if r.BootKick == 0 {
		r.BootKick = DefaultBootKick
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&upgradev1alpha1.MachineUpgrade{}).
		Watches(&machinev1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(r.upgradesForMachine)).
		Watches(&upgradev1alpha1.MachineUpgrade{}, handler.EnqueueRequestsFromMapFunc(r.upgradesWaitingFor)).
		Complete(r)
}

// upgradesForMachine maps a Machine to the unfinished MachineUpgrades of
// its namespace that list it or select it.
func (r *Reconciler) upgradesForMachine(ctx context.Context, o client.Object) []reconcile.Request {
	l := &upgradev1alpha1.MachineUpgradeList{}
	if err := r.List(ctx, l, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range l.Items {
		u := &l.Items[i]
		if u.Finished() {
			continue
		}
		if u.Status.Machine(o.GetName()) != nil {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(u)})
			continue
		}
		if sel, err := selectorOf(u); err == nil && sel.Matches(labels.Set(o.GetLabels())) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(u)})
		}
	}
	return out
}

// upgradesWaitingFor maps a MachineUpgrade to the others of its namespace
// that wait for an overlapping one (WaitingForUpgrade): any change to it
// (it finished, gave its claim back, or is gone) may let them start.
func (r *Reconciler) upgradesWaitingFor(ctx context.Context, o client.Object) []reconcile.Request {
	l := &upgradev1alpha1.MachineUpgradeList{}
	if err := r.List(ctx, l, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing MachineUpgrades to wake those waiting for an overlapping one")
		return nil
	}
	var out []reconcile.Request
	for i := range l.Items {
		u := &l.Items[i]
		if u.Name == o.GetName() || u.Finished() {
			continue
		}
		if c := meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.ReadyCondition); c != nil && c.Reason == upgradev1alpha1.WaitingForUpgradeReason {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(u)})
		}
	}
	return out
}

// scope is what one reconcile read and observed.
type scope struct {
	u    *upgradev1alpha1.MachineUpgrade
	base *upgradev1alpha1.MachineUpgrade // the status as last written
	now  time.Time
	// startedHere: the Machines whose current step this reconcile
	// checkpointed as Running (so its side effect has not run yet).
	startedHere map[string]bool
	// observations for the conditions
	drainBlocked []string // messages of drains a PodDisruptionBudget holds
	waiting      []string // messages of Machines not back yet
	invalid      string   // why the spec cannot be acted on
	overlap      string   // the MachineUpgrade this one waits for
	requeue      time.Duration
}

func (s *scope) requeueAfter(d time.Duration) {
	if d <= 0 {
		d = 10 * time.Millisecond
	}
	if s.requeue == 0 || d < s.requeue {
		s.requeue = d
	}
}

// Reconcile drives one MachineUpgrade one or more steps on.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	// The upgrade is read uncached: its status is the checkpoint, and
	// acting on a stale one would repeat a step. Every write is still
	// locked on the resourceVersion read here.
	u := &upgradev1alpha1.MachineUpgrade{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("MachineUpgrade", req.String()))
	s := &scope{u: u, base: u.DeepCopy(), now: r.Now(), startedHere: map[string]bool{}}
	if !u.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	// The finalizer is added before the first side effect (an unfinished
	// upgrade stored before it existed gets it here too); a finished one
	// has nothing to undo and is not given it.
	if !u.Finished() {
		if _, err := creconcile.EnsureFinalizer(ctx, r.Client, u, upgradev1alpha1.MachineUpgradeFinalizer); err != nil {
			// A conflict is returned like any error: the rate limiter
			// requeues, and the next reconcile reads again.
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		// The finalizer patch moved the resourceVersion on; the status is
		// as read.
		s.base = u.DeepCopy()
	}
	defer func() {
		if retErr == nil || errors.Is(retErr, reconcile.TerminalError(nil)) {
			u.Status.ObservedGeneration = u.Generation
		}
		// A conflict (another write came first) is returned like any
		// error: the rate limiter requeues, and the next reconcile reads
		// again and acts on what the other write left.
		retErr = errors.Join(retErr, r.checkpoint(ctx, s))
	}()
	if err := r.reconcileNormal(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.requeue}, nil
}

// reconcileDelete leaves every Machine in flight as an abort leaves it
// (never a reset, never a further image write, nothing deleted), each
// checkpointed Aborted with a Deleted Event saying what was left, then
// removes the finalizer. A Machine already left is not visited again, so a
// reconcile stopped at any point and run again does the rest.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s.u, upgradev1alpha1.MachineUpgradeFinalizer) {
		return ctrl.Result{}, nil
	}
	for i := range s.u.Status.Machines {
		mp := &s.u.Status.Machines[i]
		if mp.State != upgradev1alpha1.MachineUpgrading && mp.State != upgradev1alpha1.MachineFailed {
			continue
		}
		if err := r.leave(ctx, s, mp.Name, whyDeleted); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.removeFinalizer(ctx, s)
}

// removeFinalizer removes the finalizer through the kit (a merge patch
// locked on the resourceVersion of the last read or write).
func (r *Reconciler) removeFinalizer(ctx context.Context, s *scope) (ctrl.Result, error) {
	return ctrl.Result{}, creconcile.RemoveFinalizer(ctx, r.Client, s.u, upgradev1alpha1.MachineUpgradeFinalizer)
}

// checkpoint writes the status as a merge patch locked on the
// resourceVersion of the last read or write (the kit's PatchStatusLocked):
// a conflict is returned, never re-applied, so two reconciles can never
// both record the start of a step. On success u holds what the server
// stored.
func (r *Reconciler) checkpoint(ctx context.Context, s *scope) error {
	computeStatus(s)
	sent, err := creconcile.PatchStatusLocked(ctx, r.Client, s.base, s.u, client.FieldOwner(FieldManager))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpointing: %w", err)
	}
	if sent {
		s.base = s.u.DeepCopy()
	}
	return nil
}

func selectorOf(u *upgradev1alpha1.MachineUpgrade) (labels.Selector, error) {
	sel, err := metav1LabelSelectorAsSelector(u)
	if err != nil {
		return nil, fmt.Errorf("spec.selector: %w", err)
	}
	return sel, nil
}
