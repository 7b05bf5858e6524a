package machine

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
)

// +kubebuilder:webhook:path=/validate-infrastructure-converge-dev-v1alpha1-kwokmachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.converge.dev,resources=kwokmachines,verbs=create;update,versions=v1alpha1,name=vkwokmachine.infrastructure.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-infrastructure-converge-dev-v1alpha1-qemumachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.converge.dev,resources=qemumachines,verbs=create;update,versions=v1alpha1,name=vqemumachine.infrastructure.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Providers validates the built-in provider kinds: spec.providerID is the
// provider's to write, and the only value it ever writes is the object's
// own (kwok://<namespace>/<name>, qemu://<namespace>/<name>); any other
// value, such as another tenant's machine's, is refused.
type Providers struct{}

// SetupWithManager registers the KwokMachine and QemuMachine webhooks,
// both served by one providerIDValidator.
func (Providers) SetupWithManager(mgr ctrl.Manager) error {
	kwok := providerIDValidator[*infrastructurev1alpha1.KwokMachine]{
		kind: infrastructurev1alpha1.GroupVersion.WithKind("KwokMachine").GroupKind(),
		got:  func(km *infrastructurev1alpha1.KwokMachine) string { return km.Spec.ProviderID },
		own:  machinespec.KwokProviderID,
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrastructurev1alpha1.KwokMachine{}).WithValidator(kwok).Complete(); err != nil {
		return err
	}
	qemu := providerIDValidator[*infrastructurev1alpha1.QemuMachine]{
		kind: infrastructurev1alpha1.GroupVersion.WithKind("QemuMachine").GroupKind(),
		got:  func(qm *infrastructurev1alpha1.QemuMachine) string { return qm.Spec.ProviderID },
		own:  machinespec.QemuProviderID,
	}
	return ctrl.NewWebhookManagedBy(mgr, &infrastructurev1alpha1.QemuMachine{}).WithValidator(qemu).Complete()
}

// ValidateProviderID refuses a providerID other than "" and own, naming
// spec.providerID.
func ValidateProviderID(gk schema.GroupKind, name, got, own string) error {
	if got == "" || got == own {
		return nil
	}
	return apierrors.NewInvalid(gk, name, field.ErrorList{field.Invalid(field.NewPath("spec", "providerID"), got,
		"written by the provider only; the only value allowed is this object's own, "+own)})
}

// providerIDValidator is the admission check of a provider kind whose
// spec.providerID may only be the object's own: got reads it, own is the
// provider's value for the object.
type providerIDValidator[T client.Object] struct {
	kind schema.GroupKind
	got  func(T) string
	own  func(T) string
}

func (v providerIDValidator[T]) check(o T) error {
	return ValidateProviderID(v.kind, o.GetName(), v.got(o), v.own(o))
}

func (v providerIDValidator[T]) ValidateCreate(_ context.Context, o T) (admission.Warnings, error) {
	return nil, v.check(o)
}

func (v providerIDValidator[T]) ValidateUpdate(_ context.Context, old, o T) (admission.Warnings, error) {
	if v.got(old) == v.got(o) {
		return nil, nil // a stored value is never a reason to refuse finalizer or status work
	}
	return nil, v.check(o)
}

func (providerIDValidator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}
