// Package bmc holds the admission webhook of the bmc.converge.dev API
// group: what the schema cannot check on a MachineBMC (names that are
// object names, an immutable machineRef, a protocol named twice) is
// refused naming the field.
package bmc

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-bmc-converge-dev-v1alpha1-machinebmc,mutating=false,failurePolicy=fail,sideEffects=None,groups=bmc.converge.dev,resources=machinebmcs,verbs=create;update,versions=v1alpha1,name=vmachinebmc.bmc.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// MachineBMC validates MachineBMCs.
type MachineBMC struct{}

// SetupWithManager registers the webhook with the manager's webhook server.
func (w MachineBMC) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &bmcv1alpha1.MachineBMC{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new MachineBMC.
func (MachineBMC) ValidateCreate(_ context.Context, b *bmcv1alpha1.MachineBMC) (admission.Warnings, error) {
	return nil, toStatus(b.Name, ValidateSpec(&b.Spec, field.NewPath("spec")))
}

// ValidateUpdate checks a change; machineRef is immutable.
func (MachineBMC) ValidateUpdate(_ context.Context, old, b *bmcv1alpha1.MachineBMC) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, b.Spec) {
		return nil, nil
	}
	p := field.NewPath("spec")
	errs := ValidateSpec(&b.Spec, p)
	if old.Spec.MachineRef != b.Spec.MachineRef {
		errs = append(errs, field.Invalid(p.Child("machineRef"), b.Spec.MachineRef.Name, "field is immutable (create a new MachineBMC instead)"))
	}
	return nil, toStatus(b.Name, errs)
}

// ValidateDelete allows every deletion.
func (MachineBMC) ValidateDelete(context.Context, *bmcv1alpha1.MachineBMC) (admission.Warnings, error) {
	return nil, nil
}

// ValidateSpec checks that the references are object names and that no
// protocol is listed twice.
func ValidateSpec(spec *bmcv1alpha1.MachineBMCSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, ref := range []struct {
		path *field.Path
		name string
	}{{p.Child("machineRef", "name"), spec.MachineRef.Name}, {p.Child("authSecretRef", "name"), spec.AuthSecretRef.Name}} {
		for _, msg := range validation.IsDNS1123Subdomain(ref.name) {
			errs = append(errs, field.Invalid(ref.path, ref.name, msg))
		}
	}
	seen := map[bmcv1alpha1.Protocol]bool{}
	for i, pr := range spec.Protocols {
		if seen[pr] {
			errs = append(errs, field.Duplicate(p.Child("protocols").Index(i), pr))
		}
		seen[pr] = true
	}
	return errs
}

func toStatus(name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(bmcv1alpha1.GroupVersion.WithKind("MachineBMC").GroupKind(), name, errs)
}
