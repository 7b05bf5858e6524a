package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// reconcileDelete prunes the inventory when spec.prune is true (with the same
// ownership and opt-out rules as a normal prune, as the Sync's identity) and
// orphans it otherwise, then removes the finalizer. A failed deletion keeps
// the finalizer and is retried. Objects the identity may not even read are
// orphaned, never deleted as the manager, and so is everything when a
// manager in lockdown has no identity to act as: a Sync can always go.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	sy := s.sync
	s.deleting = true
	if !controllerutil.ContainsFinalizer(sy, gitopsv1alpha1.SyncFinalizer) {
		// Done; another finalizer holds the object. A requested reconcile
		// is handled: there is nothing left to do.
		if v, ok := creconcile.RequestedAt(sy); ok {
			sy.Status.LastHandledReconcileAt = v
		}
		return ctrl.Result{}, nil
	}
	if sy.Spec.Prune != nil && *sy.Spec.Prune && !sy.Spec.Suspend {
		inventory := sy.Status.Inventory
		c, err := r.clientFor(sy)
		switch {
		case errors.Is(err, errNoIdentity):
			if len(inventory) > 0 {
				r.Recorder.Eventf(sy, nil, corev1.EventTypeWarning, gitopsv1alpha1.ServiceAccountRequiredReason, "Prune",
					"Orphaning %d objects: no service account to delete them as (lockdown)", len(inventory))
			}
			inventory = nil
		case err != nil:
			return ctrl.Result{}, err
		case s.st.scanLeaks():
			leaked, err := r.leaked(ctx, s, c, nil)
			if err != nil {
				s.st.rescanLeaks()
				return ctrl.Result{}, err
			}
			inventory = append(slices.Clone(inventory), leaked...)
		}
		var errs []error
		var kept []gitopsv1alpha1.ObjectRef
		for _, ref := range inventory {
			deleted, err := r.pruneOne(ctx, c, sy, ref)
			if isForbiddenRead(err) {
				r.Recorder.Eventf(sy, nil, corev1.EventTypeWarning, gitopsv1alpha1.ReadForbiddenReason, "Prune",
					"Orphaning %s: %v", refString(ref), err)
				continue
			}
			if err != nil {
				errs = append(errs, err)
				kept = append(kept, ref)
				continue
			}
			if deleted {
				s.changes.add(resultDeleted, ref)
			}
		}
		sy.Status.Inventory = kept
		if err := errors.Join(errs...); err != nil {
			s.fail(gitopsv1alpha1.PruneFailedReason, false, "pruning on deletion: %v", err)
			return ctrl.Result{}, fmt.Errorf("pruning on deletion: %w", err)
		}
	}
	// The finalizer goes with a metadata patch; the deferred status patch
	// then finds the object gone, which is fine.
	if err := creconcile.RemoveFinalizer(ctx, r.Client, sy, gitopsv1alpha1.SyncFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	r.forget(client.ObjectKeyFromObject(sy))
	return ctrl.Result{}, nil
}
