package basicdeployment

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// computeStatus sums the children's status into the parent's and sets the
// Available, Progressing and Ready conditions; old is the status before
// this reconcile, to tell progress. It is pure apart from writing
// d.Status and s.requeueAfter, so it is table-tested.
func computeStatus(s *scope, old *workloadsv1alpha1.BasicDeploymentStatus) {
	d := s.d
	st := &d.Status
	want := replicas(d)
	st.Replicas = sum(s.all, func(rs *workloadsv1alpha1.BasicReplicaSet) int32 { return rs.Status.Replicas })
	st.ReadyReplicas = sum(s.all, func(rs *workloadsv1alpha1.BasicReplicaSet) int32 { return rs.Status.ReadyReplicas })
	st.AvailableReplicas = sum(s.all, func(rs *workloadsv1alpha1.BasicReplicaSet) int32 { return rs.Status.AvailableReplicas })
	st.UnavailableReplicas = max(0, sum(s.all, specReplicas)-st.AvailableReplicas)
	st.UpdatedReplicas = 0
	if s.newRS != nil {
		st.UpdatedReplicas = s.newRS.Status.Replicas
		st.CurrentRevision = revision(s.newRS)
	}
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
		st.Selector = sel.String()
	}

	minAvailable := want - maxUnavailable(d)
	avail := metav1.Condition{Type: workloadsv1alpha1.AvailableCondition, ObservedGeneration: d.Generation,
		Status: metav1.ConditionTrue, Reason: workloadsv1alpha1.MinimumReplicasAvailableReason,
		Message: fmt.Sprintf("%d of %d Pods available, at least %d required", st.AvailableReplicas, want, minAvailable)}
	if st.AvailableReplicas < minAvailable {
		avail.Status, avail.Reason = metav1.ConditionFalse, workloadsv1alpha1.MinimumReplicasUnavailableReason
	}
	creconcile.SetCondition(&st.Conditions, d.Generation, avail.Type, avail.Status, avail.Reason, avail.Message)

	progressing(s, old)
	ready := readyCondition(s)
	creconcile.SetCondition(&st.Conditions, d.Generation, ready.Type, ready.Status, ready.Reason, ready.Message)
}

// progressing sets the Progressing condition and lastProgressTime, and asks
// for a requeue at the progress deadline.
func progressing(s *scope, old *workloadsv1alpha1.BasicDeploymentStatus) {
	d := s.d
	st := &d.Status
	cond := metav1.Condition{Type: workloadsv1alpha1.ProgressingCondition, ObservedGeneration: d.Generation, Status: metav1.ConditionTrue}
	prev := meta.FindStatusCondition(old.Conditions, workloadsv1alpha1.ProgressingCondition)
	name := ""
	if s.newRS != nil {
		name = s.newRS.Name
	}
	deadline := time.Duration(ptr.Deref(d.Spec.ProgressDeadlineSeconds, 600)) * time.Second
	progressed := func(reason, msg string) {
		cond.Reason, cond.Message = reason, msg
		st.LastProgressTime = &metav1.Time{Time: s.now}
	}
	switch {
	case d.Spec.Paused:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, workloadsv1alpha1.PausedReason, "BasicDeployment is paused"
	case s.createErr != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, workloadsv1alpha1.FailedCreateReplicaSetReason
		cond.Message = fmt.Sprintf("Failed to create BasicReplicaSet: %v", s.createErr)
	case complete(s):
		cond.Reason = workloadsv1alpha1.NewReplicaSetAvailableReason
		cond.Message = fmt.Sprintf("BasicReplicaSet %q has successfully progressed.", name)
		if prev == nil || prev.Reason != cond.Reason {
			st.LastProgressTime = &metav1.Time{Time: s.now}
		}
	case prev != nil && prev.Reason == workloadsv1alpha1.PausedReason:
		progressed(workloadsv1alpha1.ResumedReason, "BasicDeployment is resumed")
	case s.createdNewRS:
		progressed(workloadsv1alpha1.NewReplicaSetCreatedReason, fmt.Sprintf("Created new BasicReplicaSet %q", name))
	case s.newRS != nil && (prev == nil || st.LastProgressTime == nil || madeProgress(st, old) || old.CurrentRevision != st.CurrentRevision):
		reason := workloadsv1alpha1.ReplicaSetUpdatedReason
		if prev == nil {
			reason = workloadsv1alpha1.FoundNewReplicaSetReason
		}
		progressed(reason, fmt.Sprintf("BasicReplicaSet %q is progressing.", name))
	case st.LastProgressTime != nil && !s.now.Before(st.LastProgressTime.Add(deadline)):
		cond.Status, cond.Reason = metav1.ConditionFalse, workloadsv1alpha1.ProgressDeadlineExceededReason
		cond.Message = fmt.Sprintf("BasicReplicaSet %q has timed out progressing: %s", name, stuckBecause(s))
	default:
		if prev != nil {
			cond.Status, cond.Reason, cond.Message = prev.Status, prev.Reason, prev.Message
		}
	}
	creconcile.SetCondition(&st.Conditions, d.Generation, cond.Type, cond.Status, cond.Reason, cond.Message)
	// Past its progress deadline the rollout is Failed for kstatus, as a
	// Deployment is (the rollout still goes on if it can).
	if cond.Status == metav1.ConditionFalse && cond.Reason == workloadsv1alpha1.ProgressDeadlineExceededReason {
		creconcile.MarkTrue(&st.Conditions, d.Generation, creconcile.StalledCondition, cond.Reason, cond.Message)
	} else {
		creconcile.Remove(&st.Conditions, creconcile.StalledCondition)
	}
	if cond.Status == metav1.ConditionTrue && cond.Reason != workloadsv1alpha1.NewReplicaSetAvailableReason && st.LastProgressTime != nil {
		wait := st.LastProgressTime.Add(deadline).Sub(s.now) + time.Second
		if s.requeueAfter == 0 || wait < s.requeueAfter {
			s.requeueAfter = wait
		}
	}
}

// madeProgress is kube-controller-manager's notion of progress: more
// updated, ready or available Pods, or fewer old ones.
func madeProgress(now, old *workloadsv1alpha1.BasicDeploymentStatus) bool {
	return now.UpdatedReplicas > old.UpdatedReplicas ||
		now.Replicas-now.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		now.ReadyReplicas > old.ReadyReplicas ||
		now.AvailableReplicas > old.AvailableReplicas
}

// stuckBecause names why the new child is not progressing, from its own
// conditions: the API error of a Pod it cannot create, or the Pod that is
// not Ready and why.
func stuckBecause(s *scope) string {
	rs := s.newRS
	if rs == nil {
		return "no BasicReplicaSet for the current template"
	}
	if c := meta.FindStatusCondition(rs.Status.Conditions, workloadsv1alpha1.ReplicaFailureCondition); c != nil && c.Status == metav1.ConditionTrue {
		return c.Message
	}
	if c := meta.FindStatusCondition(rs.Status.Conditions, workloadsv1alpha1.ReadyCondition); c != nil && c.Status != metav1.ConditionTrue {
		return c.Message
	}
	return fmt.Sprintf("%d of %d updated Pods available", rs.Status.AvailableReplicas, replicas(s.d))
}

// readyCondition summarises: True once the rollout is complete.
func readyCondition(s *scope) metav1.Condition {
	d := s.d
	st := &d.Status
	want := replicas(d)
	c := metav1.Condition{Type: workloadsv1alpha1.ReadyCondition, ObservedGeneration: d.Generation}
	p := meta.FindStatusCondition(st.Conditions, workloadsv1alpha1.ProgressingCondition)
	switch {
	case complete(s):
		c.Status, c.Reason = metav1.ConditionTrue, workloadsv1alpha1.AvailableReason
		c.Message = fmt.Sprintf("%d of %d Pods available at revision %d", st.AvailableReplicas, want, st.CurrentRevision)
	case p != nil && p.Status == metav1.ConditionFalse:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, p.Reason, p.Message
	case d.Spec.Paused:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, workloadsv1alpha1.PausedReason, "BasicDeployment is paused mid-rollout"
	default:
		c.Status, c.Reason = metav1.ConditionFalse, workloadsv1alpha1.RollingOutReason
		c.Message = rolloutMessage(st, want)
	}
	return c
}

// rolloutMessage is what `kubectl rollout status` says at this point.
func rolloutMessage(st *workloadsv1alpha1.BasicDeploymentStatus, want int32) string {
	switch {
	case st.UpdatedReplicas < want:
		return fmt.Sprintf("Waiting for rollout to finish: %d out of %d new replicas have been updated", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Sprintf("Waiting for rollout to finish: %d old replicas are pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		return fmt.Sprintf("Waiting for rollout to finish: %d of %d updated replicas are available", st.AvailableReplicas, st.UpdatedReplicas)
	}
	return "Waiting for the BasicReplicaSets to report"
}
