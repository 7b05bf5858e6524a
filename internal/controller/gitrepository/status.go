package gitrepository

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// computeStatus turns the observations on s into conditions: Ready always,
// Reconciling and Stalled only while True (kstatus).
func computeStatus(s *scope) {
	repo := s.repo
	set := func(t string, st metav1.ConditionStatus, reason, msg string) {
		creconcile.SetCondition(&repo.Status.Conditions, repo.Generation, t, st, reason, creconcile.Truncate(msg, creconcile.MaxMessageBytes))
	}
	switch {
	case s.failure != nil && s.failure.stalled:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionFalse, s.failure.reason, s.failure.message)
		set(gitopsv1alpha1.StalledCondition, metav1.ConditionTrue, s.failure.reason, s.failure.message)
		creconcile.Remove(&repo.Status.Conditions, gitopsv1alpha1.ReconcilingCondition)
	case s.failure != nil:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionFalse, s.failure.reason, s.failure.message)
		set(gitopsv1alpha1.ReconcilingCondition, metav1.ConditionTrue, s.failure.reason, "retrying: "+s.failure.message)
		creconcile.Remove(&repo.Status.Conditions, gitopsv1alpha1.StalledCondition)
	case s.suspended:
		// Ready keeps its last value: the artifact is still served.
		creconcile.Remove(&repo.Status.Conditions, gitopsv1alpha1.ReconcilingCondition)
		creconcile.Remove(&repo.Status.Conditions, gitopsv1alpha1.StalledCondition)
	case repo.Status.Artifact != nil:
		set(gitopsv1alpha1.ReadyCondition, metav1.ConditionTrue, gitopsv1alpha1.SucceededReason,
			"stored artifact for revision "+repo.Status.Artifact.Revision)
		creconcile.Remove(&repo.Status.Conditions, gitopsv1alpha1.ReconcilingCondition)
		creconcile.Remove(&repo.Status.Conditions, gitopsv1alpha1.StalledCondition)
	}
}
