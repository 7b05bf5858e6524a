package reconcile_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// The API groups name the same annotation the kit reads (they do not import
// the kit).
func TestRequestedAtAnnotationIsTheAPIs(t *testing.T) {
	for _, a := range []string{gitopsv1alpha1.ReconcileRequestAnnotation, sqlv1alpha1.ReconcileRequestedAtAnnotation} {
		if a != reconcile.RequestedAtAnnotation {
			t.Errorf("API annotation %q is not the kit's %q", a, reconcile.RequestedAtAnnotation)
		}
	}
}

func TestRequestedAt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		annots map[string]string
		want   string
		ok     bool
	}{
		{"none", nil, "", false},
		{"empty", map[string]string{reconcile.RequestedAtAnnotation: ""}, "", false},
		{"timestamp", map[string]string{reconcile.RequestedAtAnnotation: "2026-11-29T16:50:00Z"}, "2026-11-29T16:50:00Z", true},
		{"at the bound", map[string]string{reconcile.RequestedAtAnnotation: strings.Repeat("x", reconcile.MaxRequestedAtBytes)}, strings.Repeat("x", reconcile.MaxRequestedAtBytes), true},
		{"past the bound", map[string]string{reconcile.RequestedAtAnnotation: strings.Repeat("x", reconcile.MaxRequestedAtBytes+1)}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := reconcile.RequestedAt(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annots}})
			if got != tc.want || ok != tc.ok {
				t.Fatalf("RequestedAt = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
