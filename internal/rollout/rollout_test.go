package rollout

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

func TestStatusMessage(t *testing.T) {
	d := &workloadsv1alpha1.BasicDeployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 2}}
	d.Spec.Replicas = ptr.To[int32](3)
	cases := []struct {
		status   workloadsv1alpha1.BasicDeploymentStatus
		paused   bool
		want     string
		done     bool
		deadline bool
	}{
		{status: workloadsv1alpha1.BasicDeploymentStatus{ObservedGeneration: 1}, want: "spec update to be observed"},
		{status: workloadsv1alpha1.BasicDeploymentStatus{ObservedGeneration: 2, UpdatedReplicas: 1, Replicas: 4}, want: "1 out of 3 new replicas have been updated"},
		{status: workloadsv1alpha1.BasicDeploymentStatus{ObservedGeneration: 2, UpdatedReplicas: 3, Replicas: 4}, want: "1 old replicas are pending termination"},
		{status: workloadsv1alpha1.BasicDeploymentStatus{ObservedGeneration: 2, UpdatedReplicas: 3, Replicas: 3, AvailableReplicas: 2}, want: "2 of 3 updated replicas are available"},
		{status: workloadsv1alpha1.BasicDeploymentStatus{ObservedGeneration: 2, UpdatedReplicas: 3, Replicas: 3, AvailableReplicas: 3}, want: "successfully rolled out", done: true},
		{status: workloadsv1alpha1.BasicDeploymentStatus{ObservedGeneration: 2}, paused: true, want: "the rollout is paused"},
		{status: workloadsv1alpha1.BasicDeploymentStatus{ObservedGeneration: 2, Conditions: []metav1.Condition{{
			Type: workloadsv1alpha1.ProgressingCondition, Status: metav1.ConditionFalse,
			Reason: workloadsv1alpha1.ProgressDeadlineExceededReason, Message: "stuck because X"}}},
			want: "stuck because X", done: true, deadline: true},
	}
	for _, c := range cases {
		d.Status, d.Spec.Paused = c.status, c.paused
		msg, done, err := statusMessage(d)
		if !strings.Contains(msg, c.want) || done != c.done || errors.Is(err, ErrDeadlineExceeded) != c.deadline {
			t.Errorf("status %+v: got %q done=%v err=%v; want %q done=%v", c.status, msg, done, err, c.want, c.done)
		}
	}
}

func TestPrintHistory(t *testing.T) {
	rs := func(rev, cause, image string) Revision {
		r := &workloadsv1alpha1.BasicReplicaSet{}
		r.Annotations = map[string]string{workloadsv1alpha1.RevisionAnnotation: rev}
		r.Spec.Template.Labels = map[string]string{"app": "web"}
		r.Spec.Template.Spec.Containers = append(r.Spec.Template.Spec.Containers, corev1.Container{Name: "c", Image: image})
		return Revision{Number: map[string]int64{"1": 1, "2": 2}[rev], ReplicaSet: r, ChangeCause: cause}
	}
	revs := []Revision{rs("1", "", "nginx:1"), rs("2", "bump", "nginx:2")}
	var b bytes.Buffer
	key := client.ObjectKey{Namespace: "ns", Name: "web"}
	if err := PrintHistory(&b, key, revs, 0); err != nil {
		t.Fatal(err)
	}
	if want := "REVISION  CHANGE-CAUSE\n1         <none>\n2         bump\n"; !strings.HasSuffix(b.String(), want) {
		t.Fatalf("history:\n%s\nwant suffix:\n%s", b.String(), want)
	}
	b.Reset()
	if err := PrintHistory(&b, key, revs, 2); err != nil || !strings.Contains(b.String(), "Image:\tnginx:2") {
		t.Fatalf("revision 2: %v\n%s", err, b.String())
	}
	if err := PrintHistory(&b, key, revs, 7); err == nil {
		t.Fatal("unknown revision accepted")
	}
}

// TestEqualTemplates: nil and empty labels are the same template (the API
// server drops an empty map); any label or field difference is not.
func TestEqualTemplates(t *testing.T) {
	tmpl := func(labels map[string]string, image string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
	}
	for _, c := range []struct {
		name string
		a, b *corev1.PodTemplateSpec
		want bool
	}{
		{"nil and empty labels", tmpl(nil, "x"), tmpl(map[string]string{}, "x"), true},
		{"empty and nil labels", tmpl(map[string]string{}, "x"), tmpl(nil, "x"), true},
		{"same labels", tmpl(map[string]string{"a": "1"}, "x"), tmpl(map[string]string{"a": "1"}, "x"), true},
		{"a label only on one", tmpl(map[string]string{"a": "1"}, "x"), tmpl(nil, "x"), false},
		{"a label only on the other", tmpl(nil, "x"), tmpl(map[string]string{"a": "1"}, "x"), false},
		{"other image", tmpl(nil, "x"), tmpl(map[string]string{}, "y"), false},
	} {
		if got := equalTemplates(c.a, c.b); got != c.want {
			t.Errorf("%s: equalTemplates = %v, want %v", c.name, got, c.want)
		}
	}
}
