// Package workloads holds the admission webhooks (defaulting and validation)
// of the workloads.converge.dev API group.
package workloads

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/webhook/specerr"
)

// +kubebuilder:webhook:path=/mutate-workloads-converge-dev-v1alpha1-basicreplicaset,mutating=true,failurePolicy=fail,sideEffects=None,groups=workloads.converge.dev,resources=basicreplicasets,verbs=create;update,versions=v1alpha1,name=mbasicreplicaset.workloads.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-workloads-converge-dev-v1alpha1-basicreplicaset,mutating=false,failurePolicy=fail,sideEffects=None,groups=workloads.converge.dev,resources=basicreplicasets,verbs=create;update,versions=v1alpha1,name=vbasicreplicaset.workloads.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// BasicReplicaSet defaults and validates BasicReplicaSets.
type BasicReplicaSet struct{}

// SetupWithManager registers the webhooks with the manager's webhook server.
func (w BasicReplicaSet) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &workloadsv1alpha1.BasicReplicaSet{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default sets replicas to 1 when unset.
func (BasicReplicaSet) Default(_ context.Context, rs *workloadsv1alpha1.BasicReplicaSet) error {
	if rs.Spec.Replicas == nil {
		rs.Spec.Replicas = ptr.To[int32](1)
	}
	return nil
}

// ValidateCreate checks a new BasicReplicaSet.
func (BasicReplicaSet) ValidateCreate(_ context.Context, rs *workloadsv1alpha1.BasicReplicaSet) (admission.Warnings, error) {
	return nil, specerr.Invalid(workloadsv1alpha1.GroupVersion, "BasicReplicaSet", rs.Name, validateSelectorAndTemplate(rs.Spec.Selector, &rs.Spec.Template, field.NewPath("spec")))
}

// ValidateUpdate checks a change to the spec; the selector is immutable.
func (BasicReplicaSet) ValidateUpdate(_ context.Context, old, rs *workloadsv1alpha1.BasicReplicaSet) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, rs.Spec) {
		// Metadata-only changes (labels, finalizers, ownerReferences) are
		// never refused, even for an object stored before a rule existed.
		return nil, nil
	}
	errs := validateSelectorAndTemplate(rs.Spec.Selector, &rs.Spec.Template, field.NewPath("spec"))
	if !apiequality.Semantic.DeepEqual(old.Spec.Selector, rs.Spec.Selector) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "selector"), rs.Spec.Selector, "field is immutable"))
	}
	return nil, specerr.Invalid(workloadsv1alpha1.GroupVersion, "BasicReplicaSet", rs.Name, errs)
}

// ValidateDelete allows every deletion.
func (BasicReplicaSet) ValidateDelete(context.Context, *workloadsv1alpha1.BasicReplicaSet) (admission.Warnings, error) {
	return nil, nil
}

// validateSelectorAndTemplate checks what the OpenAPI schema cannot: the
// selector is valid, not empty, and matches the template's labels, and the
// template has a container.
func validateSelectorAndTemplate(selector *metav1.LabelSelector, template *corev1.PodTemplateSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if selector == nil {
		return append(errs, field.Required(p.Child("selector"), "a selector is required"))
	}
	errs = append(errs, metav1validation.ValidateLabelSelector(selector,
		metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	if len(errs) > 0 {
		return errs
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return append(errs, field.Invalid(p.Child("selector"), selector, err.Error()))
	}
	if sel.Empty() {
		errs = append(errs, field.Invalid(p.Child("selector"), selector, "an empty selector would select every Pod in the namespace"))
	} else if !sel.Matches(labels.Set(template.Labels)) {
		errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), template.Labels,
			fmt.Sprintf("must match the selector %q", sel.String())))
	}
	if len(template.Spec.Containers) == 0 {
		errs = append(errs, field.Required(p.Child("template", "spec", "containers"), "at least one container is required"))
	}
	return errs
}
