package basicdeployment

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

func dep(replicas int32, surge, unavail intstr.IntOrString) *workloadsv1alpha1.BasicDeployment {
	return &workloadsv1alpha1.BasicDeployment{Spec: workloadsv1alpha1.BasicDeploymentSpec{
		Replicas: ptr.To(replicas),
		Strategy: workloadsv1alpha1.BasicDeploymentStrategy{Type: workloadsv1alpha1.RollingUpdateStrategyType,
			RollingUpdate: &workloadsv1alpha1.RollingUpdateBasicDeployment{MaxSurge: &surge, MaxUnavailable: &unavail}},
	}}
}

func child(rev int64, spec, status, available int32) *workloadsv1alpha1.BasicReplicaSet {
	rs := &workloadsv1alpha1.BasicReplicaSet{}
	rs.Name = fmt.Sprintf("rs-%d", rev)
	rs.Annotations = map[string]string{workloadsv1alpha1.RevisionAnnotation: strconv.FormatInt(rev, 10)}
	rs.Spec.Replicas = ptr.To(spec)
	rs.Status.Replicas, rs.Status.AvailableReplicas = status, available
	return rs
}

func TestFenceposts(t *testing.T) {
	cases := []struct {
		replicas       int32
		surge, unavail intstr.IntOrString
		wantS, wantU   int32
	}{
		{10, intstr.FromString("25%"), intstr.FromString("25%"), 3, 2}, // surge rounds up, unavailable down
		{1, intstr.FromString("25%"), intstr.FromString("25%"), 1, 0},
		{4, intstr.FromInt32(0), intstr.FromInt32(0), 0, 1}, // both zero would never progress
		{3, intstr.FromInt32(1), intstr.FromInt32(5), 1, 3}, // unavailable capped at replicas
	}
	for _, c := range cases {
		d := dep(c.replicas, c.surge, c.unavail)
		if s, u := maxSurge(d), maxUnavailable(d); s != c.wantS || u != c.wantU {
			t.Errorf("replicas %d surge %s unavailable %s: got %d/%d, want %d/%d", c.replicas, c.surge.String(), c.unavail.String(), s, u, c.wantS, c.wantU)
		}
	}
	r := dep(5, intstr.FromInt32(2), intstr.FromInt32(2))
	r.Spec.Strategy = workloadsv1alpha1.BasicDeploymentStrategy{Type: workloadsv1alpha1.RecreateStrategyType}
	if maxSurge(r) != 0 || maxUnavailable(r) != 0 {
		t.Error("Recreate has no surge or unavailability budget")
	}
}

func TestNewRSReplicasCountsPodsNotYetGone(t *testing.T) {
	d := dep(4, intstr.FromInt32(1), intstr.FromInt32(0))
	newRS := child(2, 1, 1, 1)
	// The old child was scaled to 3 but still reports 4 Pods: no room.
	old := child(1, 3, 4, 4)
	if n := newRSReplicas(d, []*workloadsv1alpha1.BasicReplicaSet{old, newRS}, newRS); n != 1 {
		t.Fatalf("grew to %d while the old child still has 4 Pods", n)
	}
	old.Status.Replicas = 3
	if n := newRSReplicas(d, []*workloadsv1alpha1.BasicReplicaSet{old, newRS}, newRS); n != 2 {
		t.Fatalf("got %d, want 2 once the old child reports 3 Pods", n)
	}
	if n := newRSReplicas(d, []*workloadsv1alpha1.BasicReplicaSet{child(1, 4, 4, 4)}, nil); n != 1 {
		t.Fatalf("a new child starts at maxSurge (1), got %d", n)
	}
}

func TestProportions(t *testing.T) {
	cases := []struct {
		sizes []int32
		add   int32
		want  []int32
	}{
		{[]int32{6, 4}, 5, []int32{9, 6}},
		{[]int32{6, 4}, -5, []int32{3, 2}},
		{[]int32{1, 1, 1}, 2, []int32{1, 1, 3}}, // rounding leftover to the newest, as kube-controller-manager
		{[]int32{3, 1}, -4, []int32{0, 0}},
		{[]int32{2, 2}, 0, []int32{2, 2}},
	}
	for _, c := range cases {
		var rss []*workloadsv1alpha1.BasicReplicaSet
		for i, s := range c.sizes {
			rss = append(rss, child(int64(i+1), s, s, s))
		}
		got := proportions(rss, c.add)
		var total, wantTotal int32
		for i := range got {
			total += got[i]
			wantTotal += c.sizes[i]
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) || total != wantTotal+c.add && total != 0 {
			t.Errorf("proportions(%v, %d) = %v, want %v", c.sizes, c.add, got, c.want)
		}
	}
}

func TestProgressDeadlineStatus(t *testing.T) {
	d := dep(2, intstr.FromInt32(1), intstr.FromInt32(0))
	d.Name = "web"
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](10)
	newRS := child(2, 1, 1, 0)
	newRS.Status.Conditions = []metav1.Condition{{Type: workloadsv1alpha1.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: workloadsv1alpha1.WaitingForAvailableReason, Message: "0 of 1 Pods available; Pod web-x is not Ready"}}
	old := child(1, 2, 2, 2)
	start := time.Now()
	s := &scope{d: d, now: start, all: []*workloadsv1alpha1.BasicReplicaSet{old, newRS}, newRS: newRS, oldRSs: []*workloadsv1alpha1.BasicReplicaSet{old}}
	computeStatus(s, &workloadsv1alpha1.BasicDeploymentStatus{})
	p := meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition)
	if p.Status != metav1.ConditionTrue || s.requeueAfter <= 0 || s.requeueAfter > 11*time.Second {
		t.Fatalf("first sight: %+v, requeue %v", p, s.requeueAfter)
	}
	// No progress for the deadline: False, naming the Pod.
	prev := d.Status.DeepCopy()
	s = &scope{d: d, now: start.Add(11 * time.Second), all: s.all, newRS: newRS, oldRSs: s.oldRSs}
	computeStatus(s, prev)
	p = meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition)
	if p.Status != metav1.ConditionFalse || p.Reason != workloadsv1alpha1.ProgressDeadlineExceededReason || p.Message !=
		`BasicReplicaSet "rs-2" has timed out progressing: 0 of 1 Pods available; Pod web-x is not Ready` {
		t.Fatalf("after the deadline: %+v", p)
	}
	// Progress (a Pod became available) turns it True again.
	prev = d.Status.DeepCopy()
	newRS.Status.AvailableReplicas = 1
	s = &scope{d: d, now: start.Add(12 * time.Second), all: s.all, newRS: newRS, oldRSs: s.oldRSs}
	computeStatus(s, prev)
	if p = meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition); p.Status != metav1.ConditionTrue {
		t.Fatalf("after progress: %+v", p)
	}
}
