package machine

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/drain"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// drainPoll is how often a drain in progress is looked at again.
const drainPoll = 2 * time.Second

func (r *Reconciler) deleting(s *scope, reason, msg string) {
	setCondition(s.m, machinev1alpha1.DeletingCondition, metav1.ConditionTrue, reason, msg)
	setCondition(s.m, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, reason, msg)
}

// reconcileDelete walks the deletion steps in order; each step that is not
// done yet says so in the Deleting condition and returns.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.m
	m.Status.Phase = machinev1alpha1.PhaseDeleting
	if !controllerutil.ContainsFinalizer(m, machinev1alpha1.MachineFinalizer) {
		return ctrl.Result{}, nil
	}
	if m.Spec.Paused {
		r.deleting(s, machinev1alpha1.PausedReason, "spec.paused is set: the deletion waits")
		return ctrl.Result{}, nil
	}
	if hooks := hooksWithPrefix(m, machinev1alpha1.PreDrainHookPrefix); len(hooks) > 0 {
		r.deleting(s, machinev1alpha1.WaitingForPreDrainHookReason, "held by pre-drain hook(s): "+strings.Join(hooks, "; "))
		return ctrl.Result{}, nil
	}
	if res, done, err := r.drain(ctx, s); err != nil || !done {
		return res, err
	}
	if hooks := hooksWithPrefix(m, machinev1alpha1.PreTerminateHookPrefix); len(hooks) > 0 {
		r.deleting(s, machinev1alpha1.WaitingForPreTerminateHookReason, "held by pre-terminate hook(s): "+strings.Join(hooks, "; "))
		return ctrl.Result{}, nil
	}
	if gone, err := r.deleteInfrastructure(ctx, s); err != nil || !gone {
		return ctrl.Result{}, err
	}
	if err := r.deleteNode(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	// Everything is gone: drop the finalizer; no status is written after.
	if err := creconcile.RemoveFinalizer(ctx, r.Client, m, machinev1alpha1.MachineFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	s.gone = true
	return ctrl.Result{}, nil
}

// hooksWithPrefix lists "name: value" of the hook annotations with prefix.
func hooksWithPrefix(m *machinev1alpha1.Machine, prefix string) []string {
	var out []string
	for k, v := range m.Annotations {
		if name, ok := strings.CutPrefix(k, prefix); ok {
			if v != "" {
				name += " (" + v + ")"
			}
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// machineNode returns the Node that is this Machine's (by status.nodeRef,
// checked against its UID, status.providerID and the provider's
// NodeOwnerAnnotation), or nil: a drain or a deletion never touches another.
func (r *Reconciler) machineNode(ctx context.Context, m *machinev1alpha1.Machine) (*corev1.Node, error) {
	if m.Status.NodeRef == nil || m.Status.NodeRef.UID == "" || m.Status.ProviderID == "" {
		return nil, nil
	}
	n := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: m.Status.NodeRef.Name}, n); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if n.UID != m.Status.NodeRef.UID || n.Spec.ProviderID != m.Status.ProviderID || n.Annotations[contract.NodeOwnerAnnotation] == "" {
		return nil, nil // not ours (any more), or never registered by a provider
	}
	return n, nil
}

// drain cordons the Machine's Node and evicts its Pods through the Eviction
// API, so PodDisruptionBudgets are honoured. done is true when nothing is
// left to evict, when there is no Node, or after the drain timeout.
func (r *Reconciler) drain(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	m := s.m
	if _, skip := m.Annotations[machinev1alpha1.ExcludeDrainAnnotation]; skip {
		return ctrl.Result{}, true, nil
	}
	node, err := r.machineNode(ctx, m)
	if err != nil || node == nil {
		return ctrl.Result{}, err == nil, err
	}
	if _, err := drain.Cordon(ctx, r.Client, node); err != nil {
		return ctrl.Result{}, false, err
	}
	if m.Status.Deletion == nil || m.Status.Deletion.NodeDrainStartTime == nil {
		now := metav1.Now()
		m.Status.Deletion = &machinev1alpha1.MachineDeletionStatus{NodeDrainStartTime: &now}
	}
	res, err := drain.Evict(ctx, r.Client, r.APIReader, node.Name)
	// The Machine's status and Events are its tenant's to read: Pods of
	// other namespaces on its Node are evicted, never named.
	res = res.In(m.Namespace)
	for _, p := range res.Evicted {
		var related runtime.Object
		if p.Namespace == m.Namespace {
			related = p
		}
		r.Recorder.Eventf(m, related, corev1.EventTypeNormal, EventEvicted, "Drain", "Evicted Pod %s from Node %s", drain.Name(m.Namespace, p), node.Name)
	}
	if err != nil {
		return ctrl.Result{}, false, err
	}
	waiting, refused := res.Waiting, res.Refused
	if len(waiting) == 0 {
		return ctrl.Result{}, true, nil
	}
	if time.Since(m.Status.Deletion.NodeDrainStartTime.Time) > r.DrainTimeout {
		r.Recorder.Eventf(m, node, corev1.EventTypeWarning, EventDrainTimeout, "Drain",
			"Drain of Node %s did not finish within %s; deleting the machine with %d Pod(s) left: %s", node.Name, r.DrainTimeout, len(waiting), drain.JoinNames(waiting, 5))
		return ctrl.Result{}, true, nil
	}
	msg := fmt.Sprintf("draining Node %s: %d Pod(s) left: %s", node.Name, len(waiting), drain.JoinNames(waiting, 5))
	if len(refused) > 0 {
		msg += fmt.Sprintf("; a PodDisruptionBudget refuses the eviction of %s", drain.JoinNames(refused, 5))
	}
	r.deleting(s, machinev1alpha1.DrainingReason, msg)
	return ctrl.Result{RequeueAfter: drainPoll}, false, nil
}

// deleteInfrastructure deletes the provider object and reports whether it
// is gone.
func (r *Reconciler) deleteInfrastructure(ctx context.Context, s *scope) (bool, error) {
	if err := r.getInfrastructure(ctx, s); err != nil {
		return false, err
	}
	if s.infra == nil {
		// Not found, or never ours (owned by another, unknown kind): there
		// is nothing of ours to delete.
		return true, nil
	}
	if s.infra.GetDeletionTimestamp().IsZero() {
		if err := r.Delete(ctx, s.infra, client.Preconditions{UID: ptr.To(s.infra.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("deleting %s %s: %w", s.infra.GetKind(), s.infra.GetName(), err)
		}
	}
	r.deleting(s, machinev1alpha1.WaitingForInfrastructureDeletionReason,
		fmt.Sprintf("waiting for %s %s to be deleted", s.infra.GetKind(), s.infra.GetName()))
	return false, nil
}

// deleteNode deletes the Machine's Node, if it still is ours.
func (r *Reconciler) deleteNode(ctx context.Context, s *scope) error {
	node, err := r.machineNode(ctx, s.m)
	if err != nil || node == nil {
		return err
	}
	if err := r.Delete(ctx, node, client.Preconditions{UID: ptr.To(node.UID)}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Node %s: %w", node.Name, err)
	}
	return nil
}
