package workloads

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

func replicaSet() *workloadsv1alpha1.BasicReplicaSet {
	d := deployment()
	return &workloadsv1alpha1.BasicReplicaSet{ObjectMeta: d.ObjectMeta,
		Spec: workloadsv1alpha1.BasicReplicaSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template}}
}

func TestBasicReplicaSetDefaults(t *testing.T) {
	rs := replicaSet()
	_ = (BasicReplicaSet{}).Default(t.Context(), rs)
	if rs.Spec.Replicas == nil || *rs.Spec.Replicas != 1 {
		t.Fatalf("replicas = %v, want 1", rs.Spec.Replicas)
	}
	rs.Spec.Replicas = ptr.To[int32](3)
	_ = (BasicReplicaSet{}).Default(t.Context(), rs)
	if *rs.Spec.Replicas != 3 {
		t.Fatalf("replicas = %d, want the given 3", *rs.Spec.Replicas)
	}
}

func TestBasicReplicaSetValidation(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*workloadsv1alpha1.BasicReplicaSet)
		want   string // substring of the error; "" = valid
		not    string // must not be in the error
	}{
		{"valid", func(*workloadsv1alpha1.BasicReplicaSet) {}, "", ""},
		{"no selector", func(rs *workloadsv1alpha1.BasicReplicaSet) { rs.Spec.Selector = nil }, "spec.selector: Required value", ""},
		{"invalid selector", func(rs *workloadsv1alpha1.BasicReplicaSet) {
			rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}
			rs.Spec.Template.Spec.Containers = nil
		}, "spec.selector.matchLabels", "at least one container"},
		{"selector does not match", func(rs *workloadsv1alpha1.BasicReplicaSet) {
			rs.Spec.Template.Labels = nil
		}, "spec.template.metadata.labels: Invalid value", ""},
		{"empty selector", func(rs *workloadsv1alpha1.BasicReplicaSet) {
			rs.Spec.Selector = &metav1.LabelSelector{}
			rs.Spec.Template.Labels = nil
		}, "would select every Pod", "must match the selector"},
		{"no containers", func(rs *workloadsv1alpha1.BasicReplicaSet) {
			rs.Spec.Template.Spec.Containers = nil
		}, "spec.template.spec.containers: Required value", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := replicaSet()
			tc.mutate(rs)
			_, err := (BasicReplicaSet{}).ValidateCreate(t.Context(), rs)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid spec refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			case tc.not != "" && strings.Contains(err.Error(), tc.not):
				t.Fatalf("error %v contains %q", err, tc.not)
			}
		})
	}
}

func TestBasicReplicaSetUpdate(t *testing.T) {
	old := replicaSet()
	rs := old.DeepCopy()
	rs.Spec.Replicas = ptr.To[int32](5)
	if _, err := (BasicReplicaSet{}).ValidateUpdate(t.Context(), old, rs); err != nil {
		t.Fatalf("scale refused: %v", err)
	}
	rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "tier": "x"}}
	rs.Spec.Template.Labels = map[string]string{"app": "web", "tier": "x"}
	if _, err := (BasicReplicaSet{}).ValidateUpdate(t.Context(), old, rs); err == nil || !strings.Contains(err.Error(), "spec.selector: Invalid value") {
		t.Fatalf("selector change allowed: %v", err)
	}
	bad := old.DeepCopy()
	bad.Spec.Template.Spec.Containers = nil
	meta := bad.DeepCopy()
	meta.Labels = map[string]string{"x": "y"}
	if _, err := (BasicReplicaSet{}).ValidateUpdate(t.Context(), bad, meta); err != nil {
		t.Fatalf("metadata-only update refused: %v", err)
	}
}

func TestBasicDeploymentGivenValuesKept(t *testing.T) {
	d := deployment()
	d.Spec.Replicas = ptr.To[int32](3)
	d.Spec.RevisionHistoryLimit = ptr.To[int32](2)
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](60)
	d.Spec.Strategy.RollingUpdate = &workloadsv1alpha1.RollingUpdateBasicDeployment{MaxSurge: ptr.To(intstr.FromInt32(2))}
	_ = (BasicDeployment{}).Default(t.Context(), d)
	s := d.Spec
	if *s.Replicas != 3 || *s.RevisionHistoryLimit != 2 || *s.ProgressDeadlineSeconds != 60 ||
		s.Strategy.RollingUpdate.MaxSurge.String() != "2" || s.Strategy.RollingUpdate.MaxUnavailable.String() != "25%" {
		t.Fatalf("given values changed or missing defaults: %+v", s)
	}
	d.Spec.Strategy.RollingUpdate = &workloadsv1alpha1.RollingUpdateBasicDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0))}
	_ = (BasicDeployment{}).Default(t.Context(), d)
	if got := d.Spec.Strategy.RollingUpdate; got.MaxSurge.String() != "25%" || got.MaxUnavailable.String() != "0" {
		t.Fatalf("rollingUpdate = %+v", got)
	}
}

func TestBasicDeploymentValidationValid(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*workloadsv1alpha1.BasicDeployment)
	}{
		{"integers", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(0))
		}},
		{"surge 0%", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("0%"))
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
		}},
		{"deadline above minReadySeconds", func(d *workloadsv1alpha1.BasicDeployment) { d.Spec.MinReadySeconds = 599 }},
		{"recreate", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Strategy = workloadsv1alpha1.BasicDeploymentStrategy{Type: workloadsv1alpha1.RecreateStrategyType}
		}},
		{"no deadline", func(d *workloadsv1alpha1.BasicDeployment) { d.Spec.ProgressDeadlineSeconds = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := deployment()
			_ = (BasicDeployment{}).Default(t.Context(), d)
			c.mutate(d)
			if _, err := (BasicDeployment{}).ValidateCreate(t.Context(), d); err != nil {
				t.Fatalf("valid spec refused: %v", err)
			}
		})
	}
}

// TestRollingUpdateOneErrorEach: an unset value counts as 0, and a
// malformed one is reported once, not also as 0.
func TestRollingUpdateOneErrorEach(t *testing.T) {
	p := field.NewPath("spec", "strategy", "rollingUpdate")
	for _, c := range []struct {
		name string
		ru   workloadsv1alpha1.RollingUpdateBasicDeployment
		want string
	}{
		{"unavailable 0, surge unset", workloadsv1alpha1.RollingUpdateBasicDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0))}, "spec.strategy.rollingUpdate.maxUnavailable"},
		{"malformed surge", workloadsv1alpha1.RollingUpdateBasicDeployment{MaxSurge: ptr.To(intstr.FromString("x")), MaxUnavailable: ptr.To(intstr.FromString("0%"))}, "spec.strategy.rollingUpdate.maxSurge"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := validateRollingUpdate(&c.ru, p)
			if len(errs) != 1 || errs[0].Field != c.want {
				t.Fatalf("errors %v, want one naming %s", errs, c.want)
			}
		})
	}
}
