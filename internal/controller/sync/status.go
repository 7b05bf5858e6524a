package sync

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// computeStatus turns the observations on s into conditions: Ready always,
// Healthy with wait or healthChecks, PruneHeld while a prune waits for
// approval, and Reconciling and Stalled only while True (kstatus).
func computeStatus(s *scope) {
	sy := s.sync
	conds := &sy.Status.Conditions
	set := func(t string, st metav1.ConditionStatus, reason, msg string) {
		reconcile.SetCondition(conds, sy.Generation, t, st, reason, reconcile.Truncate(msg, reconcile.MaxMessageBytes))
	}
	del := func(t string) { reconcile.Remove(conds, t) }

	if s.healthy != nil {
		if *s.healthy {
			set(gitopsv1alpha1.HealthyCondition, metav1.ConditionTrue, gitopsv1alpha1.SucceededReason, s.healthMsg)
		} else {
			reason := gitopsv1alpha1.WaitingForHealthReason
			if s.failure != nil && s.failure.reason == gitopsv1alpha1.HealthCheckFailedReason {
				reason = gitopsv1alpha1.HealthCheckFailedReason
			}
			set(gitopsv1alpha1.HealthyCondition, metav1.ConditionFalse, reason, s.healthMsg)
		}
	} else if !sy.Spec.Wait && len(sy.Spec.HealthChecks) == 0 {
		del(gitopsv1alpha1.HealthyCondition)
	}
	if s.pruneHeld != nil {
		set(gitopsv1alpha1.PruneHeldCondition, metav1.ConditionTrue, gitopsv1alpha1.PruneLimitExceededReason,
			fmt.Sprintf("revision %s would prune %d of %d objects, more than pruneLimit allows (%d); approve with the %s annotation set to the revision",
				s.pruneHeld.Revision, s.pruneHeld.Count, len(sy.Status.Inventory), s.pruneHeld.Limit, gitopsv1alpha1.ApprovePruneAnnotation))
	} else if s.applied || s.failure == nil {
		del(gitopsv1alpha1.PruneHeldCondition)
	}

	switch {
	case s.deleting && s.failure != nil:
		// Say why the deletion does not finish (a prune the API server
		// refuses), rather than a bare "deleting".
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionFalse, gitopsv1alpha1.DeletingReason, "deleting: "+s.failure.message)
		set(gitopsv1alpha1.ReconcilingCondition, metav1.ConditionTrue, s.failure.reason, "retrying: "+s.failure.message)
	case s.deleting:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionFalse, gitopsv1alpha1.DeletingReason, "deleting")
	case s.suspended:
		del(gitopsv1alpha1.ReconcilingCondition)
		del(gitopsv1alpha1.StalledCondition)
	case s.failure != nil && s.failure.stalled:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionFalse, s.failure.reason, s.failure.message)
		set(gitopsv1alpha1.StalledCondition, metav1.ConditionTrue, s.failure.reason, s.failure.message)
		del(gitopsv1alpha1.ReconcilingCondition)
	case s.failure != nil:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionFalse, s.failure.reason, s.failure.message)
		set(gitopsv1alpha1.ReconcilingCondition, metav1.ConditionTrue, s.failure.reason, "retrying: "+s.failure.message)
		del(gitopsv1alpha1.StalledCondition)
	case s.waiting:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionFalse, gitopsv1alpha1.WaitingForHealthReason, "revision "+s.revision+" applied; "+s.healthMsg)
		set(gitopsv1alpha1.ReconcilingCondition, metav1.ConditionTrue, gitopsv1alpha1.WaitingForHealthReason, s.healthMsg)
		del(gitopsv1alpha1.StalledCondition)
	case s.pruneHeld != nil:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionFalse, gitopsv1alpha1.PruneLimitExceededReason,
			fmt.Sprintf("revision %s applied; prune of %d objects held for approval (see status.pendingPrune)", s.revision, s.pruneHeld.Count))
		del(gitopsv1alpha1.ReconcilingCondition)
		del(gitopsv1alpha1.StalledCondition)
	case s.applied:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionTrue, gitopsv1alpha1.SucceededReason,
			"applied revision "+s.revision)
		del(gitopsv1alpha1.ReconcilingCondition)
		del(gitopsv1alpha1.StalledCondition)
	}
}
