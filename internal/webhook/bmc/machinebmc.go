// Package bmc holds the admission webhook of the bmc.converge.dev API
// group: what the schema cannot check on a MachineBMC (names that are
// object names, an immutable machineRef, a protocol named twice) is
// refused naming the field.
package bmc

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	"github.com/converge-dev/converge/internal/webhook/specerr"
)

// +kubebuilder:webhook:path=/validate-bmc-converge-dev-v1alpha1-machinebmc,mutating=false,failurePolicy=fail,sideEffects=None,groups=bmc.converge.dev,resources=machinebmcs,verbs=create;update,versions=v1alpha1,name=vmachinebmc.bmc.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// MachineBMC validates MachineBMCs.
type MachineBMC struct {
	// Client creates SubjectAccessReviews; SetupWithManager sets it.
	Client client.Client
}

// SetupWithManager registers the webhook with the manager's webhook server.
func (w MachineBMC) SetupWithManager(mgr ctrl.Manager) error {
	if w.Client == nil {
		w.Client = mgr.GetClient()
	}
	return ctrl.NewWebhookManagedBy(mgr, &bmcv1alpha1.MachineBMC{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new MachineBMC.
func (w MachineBMC) ValidateCreate(ctx context.Context, b *bmcv1alpha1.MachineBMC) (admission.Warnings, error) {
	errs := ValidateSpec(&b.Spec, field.NewPath("spec"))
	errs = append(errs, w.mayExpose(ctx, b)...)
	return nil, specerr.Invalid(bmcv1alpha1.GroupVersion, "MachineBMC", b.Name, errs)
}

// ValidateUpdate checks a change; machineRef is immutable.
func (w MachineBMC) ValidateUpdate(ctx context.Context, old, b *bmcv1alpha1.MachineBMC) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, b.Spec) {
		return nil, nil
	}
	p := field.NewPath("spec")
	errs := ValidateSpec(&b.Spec, p)
	if old.Spec.MachineRef != b.Spec.MachineRef {
		errs = append(errs, field.Invalid(p.Child("machineRef"), b.Spec.MachineRef.Name, "field is immutable (create a new MachineBMC instead)"))
	}
	if old.Spec.Service.Type != b.Spec.Service.Type {
		errs = append(errs, w.mayExpose(ctx, b)...)
	}
	return nil, specerr.Invalid(bmcv1alpha1.GroupVersion, "MachineBMC", b.Name, errs)
}

// mayExpose refuses a NodePort or LoadBalancer BMC to a requester who may
// not create Services in the namespace: the manager publishes the BMC
// through a Service of that type with its own rights (a cluster-mode
// manager), which must not open a way out of the cluster the cluster
// admin did not grant the tenant.
func (w MachineBMC) mayExpose(ctx context.Context, b *bmcv1alpha1.MachineBMC) field.ErrorList {
	t := b.Spec.Service.Type
	if t != bmcv1alpha1.ServiceNodePort && t != bmcv1alpha1.ServiceLoadBalancer {
		return nil
	}
	p := field.NewPath("spec", "service", "type")
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return field.ErrorList{field.InternalError(p, fmt.Errorf("no admission request to check the requester's rights: %w", err))}
	}
	u := req.UserInfo
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: map[string]authorizationv1.ExtraValue{},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: b.Namespace, Verb: "create", Resource: "services"},
	}}
	for k, v := range u.Extra {
		sar.Spec.Extra[k] = authorizationv1.ExtraValue(v)
	}
	if err := w.Client.Create(ctx, sar); err != nil {
		return field.ErrorList{field.InternalError(p, fmt.Errorf("checking whether %s may create Services in %s: %w", u.Username, b.Namespace, err))}
	}
	if !sar.Status.Allowed {
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf("%s publishes the BMC through a Service of that type in namespace %s, and %s may not create Services there; ask for that right, or use ClusterIP",
			t, b.Namespace, u.Username))}
	}
	return nil
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
