package basicreplicaset

import (
	"sort"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

func pod(name string, ready bool, readyFor time.Duration, now time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st,
		LastTransitionTime: metav1.NewTime(now.Add(-readyFor))}}
	return p
}

func TestComputeStatus(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name                 string
		replicas, minReady   int32
		pods                 []*corev1.Pod
		scaling              int
		wantReady, wantAvail int32
		wantCond             metav1.ConditionStatus
		wantReason           string
		wantRequeue          bool
	}{
		{name: "all available", replicas: 2, pods: []*corev1.Pod{pod("a", true, time.Minute, now), pod("b", true, time.Minute, now)},
			wantReady: 2, wantAvail: 2, wantCond: metav1.ConditionTrue, wantReason: workloadsv1alpha1.AvailableReason},
		{name: "scaling up", replicas: 3, pods: []*corev1.Pod{pod("a", true, time.Minute, now)}, scaling: 2,
			wantReady: 1, wantAvail: 1, wantCond: metav1.ConditionFalse, wantReason: workloadsv1alpha1.ScalingUpReason},
		{name: "ready but not for minReadySeconds", replicas: 1, minReady: 30, pods: []*corev1.Pod{pod("a", true, 10*time.Second, now)},
			wantReady: 1, wantAvail: 0, wantCond: metav1.ConditionFalse, wantReason: workloadsv1alpha1.WaitingForAvailableReason, wantRequeue: true},
		{name: "not ready", replicas: 1, pods: []*corev1.Pod{pod("a", false, 0, now)},
			wantReady: 0, wantAvail: 0, wantCond: metav1.ConditionFalse, wantReason: workloadsv1alpha1.WaitingForAvailableReason},
		{name: "scaling down", replicas: 0, pods: []*corev1.Pod{pod("a", true, time.Minute, now)}, scaling: -1,
			wantReady: 1, wantAvail: 1, wantCond: metav1.ConditionFalse, wantReason: workloadsv1alpha1.ScalingDownReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rs := &workloadsv1alpha1.BasicReplicaSet{Spec: workloadsv1alpha1.BasicReplicaSetSpec{
				Replicas: ptr.To(tt.replicas), MinReadySeconds: tt.minReady,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}}}
			s := &scope{rs: rs, now: now, pods: tt.pods, scaling: tt.scaling}
			computeStatus(s)
			g.Expect(rs.Status.ReadyReplicas).To(Equal(tt.wantReady))
			g.Expect(rs.Status.AvailableReplicas).To(Equal(tt.wantAvail))
			g.Expect(rs.Status.Selector).To(Equal("app=x"))
			c := meta.FindStatusCondition(rs.Status.Conditions, workloadsv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tt.wantCond))
			g.Expect(c.Reason).To(Equal(tt.wantReason))
			g.Expect(s.requeueAfter > 0).To(Equal(tt.wantRequeue))
		})
	}
}

func TestLessValuableDeletesTheRightPodsFirst(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	old := pod("old-ready", true, time.Hour, now)
	old.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	young := pod("young-ready", true, time.Minute, now)
	young.CreationTimestamp = metav1.NewTime(now.Add(-time.Minute))
	notReady := pod("not-ready", false, 0, now)
	pending := pod("pending", false, 0, now)
	pending.Status.Phase = corev1.PodPending
	unscheduled := pod("unscheduled", false, 0, now)
	unscheduled.Spec.NodeName = ""
	unscheduled.Status.Phase = corev1.PodPending

	pods := []*corev1.Pod{old, young, notReady, pending, unscheduled}
	sort.SliceStable(pods, func(i, j int) bool { return lessValuable(pods[i], pods[j]) })
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	g.Expect(names).To(Equal([]string{"unscheduled", "pending", "not-ready", "young-ready", "old-ready"}))
}

func TestExpectations(t *testing.T) {
	g := NewWithT(t)
	e := newExpectations()
	key := types.NamespacedName{Namespace: "ns", Name: "rs"}
	g.Expect(e.satisfied(key)).To(BeTrue())
	e.expectCreations(key, 3)
	g.Expect(e.satisfied(key)).To(BeFalse())
	e.creationsObserved(key, 2)
	g.Expect(e.satisfied(key)).To(BeFalse())
	e.creationsObserved(key, 1)
	g.Expect(e.satisfied(key)).To(BeTrue())

	e.expectDeletions(key, []types.UID{"a", "b"})
	e.deletionObserved(key, "a")
	e.deletionObserved(key, "a") // marked for deletion, then removed: counts once
	g.Expect(e.satisfied(key)).To(BeFalse())
	e.deletionObserved(key, "b")
	g.Expect(e.satisfied(key)).To(BeTrue())

	e.expectDeletions(key, []types.UID{"c"})
	e.byKey[key].timestamp = time.Now().Add(-expectationsTTL - time.Second)
	g.Expect(e.satisfied(key)).To(BeTrue(), "expired expectations do not block forever")
	e.forget(key)
	g.Expect(e.byKey).NotTo(HaveKey(key))
}
