package rollout

import (
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

func equalTemplates(a, b *corev1.PodTemplateSpec) bool {
	if len(a.Labels) == 0 && len(b.Labels) == 0 {
		a, b = a.DeepCopy(), b.DeepCopy()
		a.Labels, b.Labels = nil, nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}
