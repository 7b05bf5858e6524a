package workloads

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

func deployment() *workloadsv1alpha1.BasicDeployment {
	return &workloadsv1alpha1.BasicDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: workloadsv1alpha1.BasicDeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
		},
	}
}

func TestBasicDeploymentDefaults(t *testing.T) {
	d := deployment()
	if err := (BasicDeployment{}).Default(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	s := d.Spec
	if *s.Replicas != 1 || s.Strategy.Type != workloadsv1alpha1.RollingUpdateStrategyType ||
		s.Strategy.RollingUpdate.MaxSurge.String() != "25%" || s.Strategy.RollingUpdate.MaxUnavailable.String() != "25%" ||
		*s.RevisionHistoryLimit != 10 || *s.ProgressDeadlineSeconds != 600 {
		t.Fatalf("defaults differ from apps/v1 Deployment's: %+v", s)
	}
	r := deployment()
	r.Spec.Strategy.Type = workloadsv1alpha1.RecreateStrategyType
	_ = (BasicDeployment{}).Default(t.Context(), r)
	if r.Spec.Strategy.RollingUpdate != nil {
		t.Fatal("Recreate got rollingUpdate defaults")
	}
}

func TestBasicDeploymentValidation(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*workloadsv1alpha1.BasicDeployment)
		want   string // substring of the error; "" = valid
	}{
		{"valid", func(*workloadsv1alpha1.BasicDeployment) {}, ""},
		{"selector does not match", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Template.Labels = map[string]string{"app": "other"}
		}, `spec.template.metadata.labels: Invalid value`},
		{"empty selector", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Selector = &metav1.LabelSelector{}
		}, "would select every Pod"},
		{"both zero", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("0%"))
		}, "may not be 0 when maxSurge is 0"},
		{"negative surge", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(-1))
		}, "must be greater than or equal to 0"},
		{"recreate with rollingUpdate", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Strategy.Type = workloadsv1alpha1.RecreateStrategyType
		}, "may not be set when strategy type is Recreate"},
		{"deadline not above minReadySeconds", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.MinReadySeconds = 600
		}, "must be greater than minReadySeconds (600)"},
		{"hash label in template", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Template.Labels[workloadsv1alpha1.PodTemplateHashLabel] = "x"
		}, "is set by the controller"},
		{"no containers", func(d *workloadsv1alpha1.BasicDeployment) {
			d.Spec.Template.Spec.Containers = nil
		}, "at least one container"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := deployment()
			_ = (BasicDeployment{}).Default(t.Context(), d)
			tc.mutate(d)
			_, err := (BasicDeployment{}).ValidateCreate(t.Context(), d)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid spec refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestBasicDeploymentSelectorImmutable(t *testing.T) {
	old := deployment()
	_ = (BasicDeployment{}).Default(t.Context(), old)
	d := old.DeepCopy()
	d.Spec.Selector.MatchLabels["tier"] = "x"
	d.Spec.Template.Labels["tier"] = "x"
	if _, err := (BasicDeployment{}).ValidateUpdate(t.Context(), old, d); err == nil || !strings.Contains(err.Error(), "field is immutable") {
		t.Fatalf("selector change allowed: %v", err)
	}
	// Metadata-only changes are never refused, even of an invalid object.
	bad := old.DeepCopy()
	bad.Spec.Template.Spec.Containers = nil
	meta := bad.DeepCopy()
	meta.Labels = map[string]string{"x": "y"}
	if _, err := (BasicDeployment{}).ValidateUpdate(t.Context(), bad, meta); err != nil {
		t.Fatalf("metadata-only update refused: %v", err)
	}
}
