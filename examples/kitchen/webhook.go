package kitchen

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kitchenv1alpha1 "github.com/converge-dev/converge/examples/kitchen/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-kitchen-example-converge-dev-v1alpha1-order,mutating=false,failurePolicy=fail,sideEffects=None,groups=kitchen.example.converge.dev,resources=orders,verbs=create;update,versions=v1alpha1,name=vorder.kitchen.example.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// OrderValidator refuses Orders the kitchen cannot serve: one that asks for
// no set at all.
type OrderValidator struct{}

// SetupWithManager registers the webhook with the manager's webhook server.
func (v OrderValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &kitchenv1alpha1.Order{}).WithValidator(v).Complete()
}

// ValidateCreate checks a new Order.
func (OrderValidator) ValidateCreate(_ context.Context, o *kitchenv1alpha1.Order) (admission.Warnings, error) {
	return nil, validate(o)
}

// ValidateUpdate checks a changed Order.
func (OrderValidator) ValidateUpdate(_ context.Context, _, o *kitchenv1alpha1.Order) (admission.Warnings, error) {
	return nil, validate(o)
}

// ValidateDelete lets every Order go.
func (OrderValidator) ValidateDelete(context.Context, *kitchenv1alpha1.Order) (admission.Warnings, error) {
	return nil, nil
}

// validate returns an Invalid error naming each refused field, as the API
// server's own validation does, or nil.
func validate(o *kitchenv1alpha1.Order) error {
	var errs field.ErrorList
	if o.Spec.Sets < 1 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "sets"), o.Spec.Sets, "an Order asks for at least one set"))
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(kitchenv1alpha1.GroupVersion.WithKind("Order").GroupKind(), o.Name, errs)
}
