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
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	"github.com/converge-dev/converge/internal/webhook/specerr"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
)

// +kubebuilder:webhook:path=/mutate-machine-converge-dev-v1alpha1-machine,mutating=true,failurePolicy=fail,sideEffects=None,groups=machine.converge.dev,resources=machines,verbs=create;update,versions=v1alpha1,name=mmachine.machine.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-machine-converge-dev-v1alpha1-machine,mutating=false,failurePolicy=fail,sideEffects=None,groups=machine.converge.dev,resources=machines,verbs=create;update,versions=v1alpha1,name=vmachine.machine.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Machine defaults and validates Machines.
type Machine struct {
	// Contracts answers, from the manager's cache, whether the kind of
	// spec.infrastructureRef declares the infrastructure-machine contract;
	// SetupWithManager fills it.
	Contracts pcontract.Checker
}

// SetupWithManager registers the webhooks with the manager's webhook server.
func (w Machine) SetupWithManager(mgr ctrl.Manager) error {
	w.Contracts = pcontract.Checker{Reader: mgr.GetCache(), Mapper: mgr.GetRESTMapper()}
	return ctrl.NewWebhookManagedBy(mgr, &machinev1alpha1.Machine{}).WithDefaulter(w).WithValidator(w).Complete()
}

// Default fills powerState (On), bootDevice (Disk) and every empty
// macAddress with the stable generated one (machinespec.GenerateMAC), so that
// the MAC is visible in the spec and survives a change of name scheme.
func (Machine) Default(_ context.Context, m *machinev1alpha1.Machine) error {
	if m.Spec.PowerState == "" {
		m.Spec.PowerState = machinev1alpha1.PowerOn
	}
	if m.Spec.BootDevice == "" {
		m.Spec.BootDevice = machinev1alpha1.BootDisk
	}
	if m.Name != "" {
		m.Spec.NetworkInterfaces = machinespec.EffectiveNICs(m)
	}
	return nil
}

// ValidateCreate checks a new Machine; its infrastructureRef must name a
// kind declaring the infrastructure-machine contract (checked once: the
// reference is immutable).
func (w Machine) ValidateCreate(ctx context.Context, m *machinev1alpha1.Machine) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := ValidateSpec(&m.Spec, p)
	if len(errs) == 0 {
		e, err := w.checkContract(ctx, &m.Spec, p)
		if err != nil {
			return nil, err
		}
		errs = append(errs, e...)
	}
	return nil, specerr.Invalid(machinev1alpha1.GroupVersion, "Machine", m.Name, errs)
}

// checkContract refuses, naming spec.infrastructureRef.kind, a kind that is
// not a namespaced kind whose CRD carries the contract label.
func (w Machine) checkContract(ctx context.Context, spec *machinev1alpha1.MachineSpec, p *field.Path) (field.ErrorList, error) {
	ref := spec.InfrastructureRef
	gv, _ := schema.ParseGroupVersion(ref.APIVersion) // ValidateSpec parsed it
	if err := w.Contracts.Check(ctx, gv.WithKind(ref.Kind), pcontract.InfrastructureMachine); err != nil {
		if pcontract.IsNotDeclared(err) {
			return field.ErrorList{field.Invalid(p.Child("infrastructureRef", "kind"), ref.Kind, err.Error()+
				" (a provider's CRD declares it with the label "+pcontract.Label(pcontract.InfrastructureMachine)+"="+pcontract.Version+")")}, nil
		}
		return nil, apierrors.NewInternalError(err)
	}
	return nil, nil
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
	return nil, specerr.Invalid(machinev1alpha1.GroupVersion, "Machine", m.Name, errs)
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
