package workloads

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/webhook/specerr"
)

// +kubebuilder:webhook:path=/mutate-workloads-converge-dev-v1alpha1-basicdeployment,mutating=true,failurePolicy=fail,sideEffects=None,groups=workloads.converge.dev,resources=basicdeployments,verbs=create;update,versions=v1alpha1,name=mbasicdeployment.workloads.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-workloads-converge-dev-v1alpha1-basicdeployment,mutating=false,failurePolicy=fail,sideEffects=None,groups=workloads.converge.dev,resources=basicdeployments,verbs=create;update,versions=v1alpha1,name=vbasicdeployment.workloads.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Defaults of BasicDeployments, the same as apps/v1 Deployments'.
const (
	DefaultRevisionHistoryLimit    = 10
	DefaultProgressDeadlineSeconds = 600
)

// BasicDeployment defaults and validates BasicDeployments.
type BasicDeployment struct{}

// SetupWithManager registers the webhooks with the manager's webhook server.
func (w BasicDeployment) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &workloadsv1alpha1.BasicDeployment{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default fills in what apps/v1 defaults: replicas 1, RollingUpdate with
// 25% surge and 25% unavailable, 10 revisions of history, a 600 s progress
// deadline.
func (BasicDeployment) Default(_ context.Context, d *workloadsv1alpha1.BasicDeployment) error {
	spec := &d.Spec
	if spec.Replicas == nil {
		spec.Replicas = ptr.To[int32](1)
	}
	if spec.Strategy.Type == "" {
		spec.Strategy.Type = workloadsv1alpha1.RollingUpdateStrategyType
	}
	if spec.Strategy.Type == workloadsv1alpha1.RollingUpdateStrategyType {
		if spec.Strategy.RollingUpdate == nil {
			spec.Strategy.RollingUpdate = &workloadsv1alpha1.RollingUpdateBasicDeployment{}
		}
		ru := spec.Strategy.RollingUpdate
		if ru.MaxSurge == nil {
			ru.MaxSurge = ptr.To(intstr.FromString("25%"))
		}
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = ptr.To(intstr.FromString("25%"))
		}
	}
	if spec.RevisionHistoryLimit == nil {
		spec.RevisionHistoryLimit = ptr.To[int32](DefaultRevisionHistoryLimit)
	}
	if spec.ProgressDeadlineSeconds == nil {
		spec.ProgressDeadlineSeconds = ptr.To[int32](DefaultProgressDeadlineSeconds)
	}
	return nil
}

// ValidateCreate checks a new BasicDeployment.
func (BasicDeployment) ValidateCreate(_ context.Context, d *workloadsv1alpha1.BasicDeployment) (admission.Warnings, error) {
	return nil, specerr.Invalid(workloadsv1alpha1.GroupVersion, "BasicDeployment", d.Name, validateDeploymentSpec(&d.Spec, field.NewPath("spec")))
}

// ValidateUpdate checks a change to the spec; the selector is immutable.
func (BasicDeployment) ValidateUpdate(_ context.Context, old, d *workloadsv1alpha1.BasicDeployment) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, d.Spec) {
		return nil, nil // metadata-only changes are never refused
	}
	errs := validateDeploymentSpec(&d.Spec, field.NewPath("spec"))
	if !apiequality.Semantic.DeepEqual(old.Spec.Selector, d.Spec.Selector) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "selector"), d.Spec.Selector, "field is immutable"))
	}
	return nil, specerr.Invalid(workloadsv1alpha1.GroupVersion, "BasicDeployment", d.Name, errs)
}

// ValidateDelete allows every deletion.
func (BasicDeployment) ValidateDelete(context.Context, *workloadsv1alpha1.BasicDeployment) (admission.Warnings, error) {
	return nil, nil
}

func validateDeploymentSpec(spec *workloadsv1alpha1.BasicDeploymentSpec, p *field.Path) field.ErrorList {
	errs := validateSelectorAndTemplate(spec.Selector, &spec.Template, p)
	if _, ok := spec.Template.Labels[workloadsv1alpha1.PodTemplateHashLabel]; ok {
		errs = append(errs, field.Forbidden(p.Child("template", "metadata", "labels").Key(workloadsv1alpha1.PodTemplateHashLabel),
			"is set by the controller on each BasicReplicaSet"))
	}
	sp := p.Child("strategy")
	switch spec.Strategy.Type {
	case workloadsv1alpha1.RecreateStrategyType:
		if spec.Strategy.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(sp.Child("rollingUpdate"), "may not be set when strategy type is Recreate"))
		}
	case workloadsv1alpha1.RollingUpdateStrategyType:
		if ru := spec.Strategy.RollingUpdate; ru != nil {
			errs = append(errs, validateRollingUpdate(ru, sp.Child("rollingUpdate"))...)
		}
	}
	if d := spec.ProgressDeadlineSeconds; d != nil && *d <= spec.MinReadySeconds {
		errs = append(errs, field.Invalid(p.Child("progressDeadlineSeconds"), *d,
			fmt.Sprintf("must be greater than minReadySeconds (%d)", spec.MinReadySeconds)))
	}
	return errs
}

func validateRollingUpdate(ru *workloadsv1alpha1.RollingUpdateBasicDeployment, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(v *intstr.IntOrString, name string) {
		if v == nil {
			return
		}
		if v.Type == intstr.Int && v.IntVal < 0 {
			errs = append(errs, field.Invalid(p.Child(name), v.IntValue(), "must be greater than or equal to 0"))
		}
		if _, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true); err != nil {
			errs = append(errs, field.Invalid(p.Child(name), v.String(), "must be an integer or a percentage like \"25%\""))
		}
	}
	check(ru.MaxSurge, "maxSurge")
	check(ru.MaxUnavailable, "maxUnavailable")
	if isZero(ru.MaxSurge) && isZero(ru.MaxUnavailable) {
		errs = append(errs, field.Invalid(p.Child("maxUnavailable"), ru.MaxUnavailable.String(),
			"may not be 0 when maxSurge is 0: the rollout could never start"))
	}
	return errs
}

// isZero reports whether v is unset, 0 or 0%.
func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	if v.Type == intstr.Int {
		return v.IntVal == 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true)
	return err == nil && n == 0
}
