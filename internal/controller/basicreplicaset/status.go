package basicreplicaset

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// computeStatus turns the observations on s into status counts and
// conditions. It is pure apart from writing rs.Status, so it is table-tested.
func computeStatus(s *scope) {
	rs := s.rs
	st := &rs.Status
	st.Replicas = int32(len(s.pods))              //nolint:gosec // bounded by spec.replicas and burst
	st.TerminatingReplicas = int32(s.terminating) //nolint:gosec // bounded by the Pods in one namespace
	st.ReadyReplicas, st.AvailableReplicas = 0, 0
	var notReady *corev1.Pod
	minReady := time.Duration(rs.Spec.MinReadySeconds) * time.Second
	var nextAvailable time.Duration
	for _, p := range s.pods {
		if !podReady(p) {
			if notReady == nil || p.CreationTimestamp.Before(&notReady.CreationTimestamp) {
				notReady = p
			}
			continue
		}
		st.ReadyReplicas++
		since := s.now.Sub(readySince(p))
		if since >= minReady {
			st.AvailableReplicas++
		} else if wait := minReady - since; nextAvailable == 0 || wait < nextAvailable {
			nextAvailable = wait
		}
	}
	if nextAvailable > 0 && (s.requeueAfter == 0 || nextAvailable < s.requeueAfter) {
		// Nothing else will wake us when a Pod crosses minReadySeconds.
		s.requeueAfter = nextAvailable + 100*time.Millisecond
	}
	if sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector); err == nil {
		st.Selector = sel.String()
	}

	want := ptr.Deref(rs.Spec.Replicas, 1)
	ready := metav1.Condition{Type: workloadsv1alpha1.ReadyCondition, ObservedGeneration: rs.Generation}
	switch {
	case s.scaling > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, workloadsv1alpha1.ScalingUpReason
		ready.Message = fmt.Sprintf("%d of %d Pods exist", len(s.pods), want)
	case s.scaling < 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, workloadsv1alpha1.ScalingDownReason
		ready.Message = fmt.Sprintf("%d Pods exist, %d wanted", len(s.pods), want)
	case st.AvailableReplicas < want:
		ready.Status, ready.Reason = metav1.ConditionFalse, workloadsv1alpha1.WaitingForAvailableReason
		ready.Message = fmt.Sprintf("%d of %d Pods available", st.AvailableReplicas, want)
		if notReady != nil {
			ready.Message += "; " + whyNotReady(notReady)
		}
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, workloadsv1alpha1.AvailableReason
		ready.Message = fmt.Sprintf("%d of %d Pods available", st.AvailableReplicas, want)
	}
	creconcile.SetCondition(&st.Conditions, rs.Generation, ready.Type, ready.Status, ready.Reason, ready.Message)

	if s.failure != nil {
		reason := workloadsv1alpha1.FailedCreateReason
		if s.failureVerb == "delete" {
			reason = workloadsv1alpha1.FailedDeleteReason
		}
		creconcile.MarkTrue(&st.Conditions, rs.Generation, workloadsv1alpha1.ReplicaFailureCondition, reason, s.failure.Error())
	} else if s.scaling == 0 {
		creconcile.Remove(&st.Conditions, workloadsv1alpha1.ReplicaFailureCondition)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// whyNotReady names the oldest Pod that is not Ready and the reason its
// status gives (a waiting container's reason, or the Ready condition's), so
// that a stuck rollout says why without anyone listing Pods.
func whyNotReady(p *corev1.Pod) string {
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			msg := fmt.Sprintf("Pod %s: container %s is waiting: %s", p.Name, cs.Name, w.Reason)
			if w.Message != "" {
				msg += ": " + w.Message
			}
			return msg
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("Pod %s is not scheduled: %s %s", p.Name, c.Reason, c.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Reason != "" {
			msg := fmt.Sprintf("Pod %s is not Ready: %s", p.Name, c.Reason)
			if c.Message != "" {
				msg += ": " + c.Message
			}
			return msg
		}
	}
	return fmt.Sprintf("Pod %s is not Ready (phase %s)", p.Name, p.Status.Phase)
}
