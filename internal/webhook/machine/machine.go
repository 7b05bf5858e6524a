// Package machine holds the admission webhooks of the machine.converge.dev
// API group: a Machine's NICs get stable generated MACs, and what the schema
// cannot check (unicast MACs, a MAC twice in one Machine, an immutable
// infrastructureRef) is refused naming the field.
package machine

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	machinectrl "github.com/converge-dev/converge/internal/controller/machine"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
)

// +kubebuilder:webhook:path=/mutate-machine-converge-dev-v1alpha1-machine,mutating=true,failurePolicy=fail,sideEffects=None,groups=machine.converge.dev,resources=machines,verbs=create;update,versions=v1alpha1,name=mmachine.machine.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-machine-converge-dev-v1alpha1-machine,mutating=false,failurePolicy=fail,sideEffects=None,groups=machine.converge.dev,resources=machines,verbs=create;update,versions=v1alpha1,name=vmachine.machine.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Machine defaults and validates Machines.
type Machine struct{}

// SetupWithManager registers the webhooks with the manager's webhook server.
func (w Machine) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &machinev1alpha1.Machine{}).WithDefaulter(w).WithValidator(w).Complete()
}

// Default fills powerState (On), bootDevice (Disk) and every empty
// macAddress with the stable generated one (machine.GenerateMAC), so that
// the MAC is visible in the spec and survives a change of name scheme.
func (Machine) Default(_ context.Context, m *machinev1alpha1.Machine) error {
	if m.Spec.PowerState == "" {
		m.Spec.PowerState = machinev1alpha1.PowerOn
	}
	if m.Spec.BootDevice == "" {
		m.Spec.BootDevice = machinev1alpha1.BootDisk
	}
	if m.Name != "" {
		m.Spec.NetworkInterfaces = machinectrl.EffectiveNICs(m)
	}
	return nil
}

// ValidateCreate checks a new Machine.
func (Machine) ValidateCreate(_ context.Context, m *machinev1alpha1.Machine) (admission.Warnings, error) {
	return nil, toStatus(m.Name, ValidateSpec(&m.Spec, field.NewPath("spec")))
}

// ValidateUpdate checks a change; infrastructureRef is immutable.
func (Machine) ValidateUpdate(_ context.Context, old, m *machinev1alpha1.Machine) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, m.Spec) {
		return nil, nil // metadata-only changes (finalizers, hooks) are never refused
	}
	p := field.NewPath("spec")
	errs := ValidateSpec(&m.Spec, p)
	if old.Spec.InfrastructureRef != m.Spec.InfrastructureRef {
		errs = append(errs, field.Invalid(p.Child("infrastructureRef"), m.Spec.InfrastructureRef, "field is immutable (create a new Machine instead)"))
	}
	return nil, toStatus(m.Name, errs)
}

// ValidateDelete allows every deletion.
func (Machine) ValidateDelete(context.Context, *machinev1alpha1.Machine) (admission.Warnings, error) {
	return nil, nil
}

// ValidateSpec checks what the schema cannot: infrastructureRef parses,
// every MAC is unicast and no MAC is given to two NICs.
func ValidateSpec(spec *machinev1alpha1.MachineSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, err := schema.ParseGroupVersion(spec.InfrastructureRef.APIVersion); err != nil {
		errs = append(errs, field.Invalid(p.Child("infrastructureRef", "apiVersion"), spec.InfrastructureRef.APIVersion, err.Error()))
	}
	seen := map[string]string{}
	for i, n := range spec.NetworkInterfaces {
		fp := p.Child("networkInterfaces").Index(i).Child("macAddress")
		if n.MACAddress == "" {
			continue
		}
		if why := contract.ValidMAC(n.MACAddress); why != "" {
			errs = append(errs, field.Invalid(fp, n.MACAddress, why))
			continue
		}
		if other, dup := seen[n.MACAddress]; dup {
			errs = append(errs, field.Duplicate(fp, n.MACAddress+" (also on "+other+")"))
		}
		seen[n.MACAddress] = n.Name
	}
	return errs
}

func toStatus(name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(machinev1alpha1.GroupVersion.WithKind("Machine").GroupKind(), name, errs)
}
