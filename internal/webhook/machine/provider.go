package machine

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/kwokmachine"
	"github.com/converge-dev/converge/internal/controller/qemumachine"
)

// +kubebuilder:webhook:path=/validate-infrastructure-converge-dev-v1alpha1-kwokmachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.converge.dev,resources=kwokmachines,verbs=create;update,versions=v1alpha1,name=vkwokmachine.infrastructure.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-infrastructure-converge-dev-v1alpha1-qemumachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.converge.dev,resources=qemumachines,verbs=create;update,versions=v1alpha1,name=vqemumachine.infrastructure.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Providers validates the built-in provider kinds: spec.providerID is the
// provider's to write, and the only value it ever writes is the object's
// own (kwok://<namespace>/<name>, qemu://<namespace>/<name>); any other
// value, such as another tenant's machine's, is refused.
type Providers struct{}

// SetupWithManager registers the KwokMachine and QemuMachine webhooks.
func (Providers) SetupWithManager(mgr ctrl.Manager) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &infrastructurev1alpha1.KwokMachine{}).WithValidator(kwokValidator{}).Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &infrastructurev1alpha1.QemuMachine{}).WithValidator(qemuValidator{}).Complete()
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

type kwokValidator struct{}

func (kwokValidator) check(km *infrastructurev1alpha1.KwokMachine) error {
	return ValidateProviderID(infrastructurev1alpha1.GroupVersion.WithKind("KwokMachine").GroupKind(), km.Name, km.Spec.ProviderID, kwokmachine.ProviderID(km))
}

func (v kwokValidator) ValidateCreate(_ context.Context, km *infrastructurev1alpha1.KwokMachine) (admission.Warnings, error) {
	return nil, v.check(km)
}

func (v kwokValidator) ValidateUpdate(_ context.Context, old, km *infrastructurev1alpha1.KwokMachine) (admission.Warnings, error) {
	if old.Spec.ProviderID == km.Spec.ProviderID {
		return nil, nil // a stored value is never a reason to refuse finalizer or status work
	}
	return nil, v.check(km)
}

func (kwokValidator) ValidateDelete(context.Context, *infrastructurev1alpha1.KwokMachine) (admission.Warnings, error) {
	return nil, nil
}

type qemuValidator struct{}

func (qemuValidator) check(qm *infrastructurev1alpha1.QemuMachine) error {
	return ValidateProviderID(infrastructurev1alpha1.GroupVersion.WithKind("QemuMachine").GroupKind(), qm.Name, qm.Spec.ProviderID, qemumachine.ProviderID(qm))
}

func (v qemuValidator) ValidateCreate(_ context.Context, qm *infrastructurev1alpha1.QemuMachine) (admission.Warnings, error) {
	return nil, v.check(qm)
}

func (v qemuValidator) ValidateUpdate(_ context.Context, old, qm *infrastructurev1alpha1.QemuMachine) (admission.Warnings, error) {
	if old.Spec.ProviderID == qm.Spec.ProviderID {
		return nil, nil // a stored value is never a reason to refuse finalizer or status work
	}
	return nil, v.check(qm)
}

func (qemuValidator) ValidateDelete(context.Context, *infrastructurev1alpha1.QemuMachine) (admission.Warnings, error) {
	return nil, nil
}
