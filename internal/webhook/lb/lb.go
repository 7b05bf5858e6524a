// Package lb holds the admission webhooks of the lb.converge.dev API group:
// pools with invalid or overlapping addresses are refused naming the field,
// and a pool cannot shrink past an address it has assigned.
package lb

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbipam"
	"github.com/converge-dev/converge/internal/webhook/specerr"
)

// +kubebuilder:webhook:path=/validate-lb-converge-dev-v1alpha1-ipaddresspool,mutating=false,failurePolicy=fail,sideEffects=None,groups=lb.converge.dev,resources=ipaddresspools,verbs=create;update,versions=v1alpha1,name=vipaddresspool.lb.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-lb-converge-dev-v1alpha1-l2advertisement,mutating=false,failurePolicy=fail,sideEffects=None,groups=lb.converge.dev,resources=l2advertisements,verbs=create;update,versions=v1alpha1,name=vl2advertisement.lb.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// IPAddressPool validates pools.
type IPAddressPool struct {
	// Reader lists the other pools (overlap check). It is the manager's
	// cache: the loadbalancer-ipam controller watches every IPAddressPool
	// already (and without it the informer is a cheap one: pools are few
	// and the admin's), so an AdmissionReview, which anyone reaching the
	// webhook port can post, costs no API request. Two pools created in
	// the same instant can both pass, as they could with an uncached read
	// (both in flight at once); the cache widens that window by the watch
	// delay. Pools are the cluster admin's alone.
	Reader client.Reader
}

// SetupWithManager registers the webhook.
func (w IPAddressPool) SetupWithManager(mgr ctrl.Manager) error {
	w.Reader = mgr.GetClient()
	return ctrl.NewWebhookManagedBy(mgr, &lbv1alpha1.IPAddressPool{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new pool.
func (w IPAddressPool) ValidateCreate(ctx context.Context, p *lbv1alpha1.IPAddressPool) (admission.Warnings, error) {
	return nil, w.validate(ctx, p)
}

// ValidateUpdate checks a changed pool.
func (w IPAddressPool) ValidateUpdate(ctx context.Context, _, p *lbv1alpha1.IPAddressPool) (admission.Warnings, error) {
	return nil, w.validate(ctx, p)
}

// ValidateDelete allows every deletion.
func (IPAddressPool) ValidateDelete(context.Context, *lbv1alpha1.IPAddressPool) (admission.Warnings, error) {
	return nil, nil
}

func (w IPAddressPool) validate(ctx context.Context, p *lbv1alpha1.IPAddressPool) error {
	errs := ValidatePoolSpec(&p.Spec, field.NewPath("spec"))
	if len(errs) == 0 {
		var list lbv1alpha1.IPAddressPoolList
		if err := w.Reader.List(ctx, &list); err != nil {
			return apierrors.NewInternalError(fmt.Errorf("listing IPAddressPools: %w", err))
		}
		errs = ValidateAddresses(p, list.Items)
	}
	return specerr.Invalid(lbv1alpha1.GroupVersion, "IPAddressPool", p.Name, errs)
}

// ValidateAddresses checks p, whose spec is valid, against its own
// assignments and existing (every IPAddressPool): an assigned address that
// the new addresses no longer make usable, and an overlap with another
// pool's parsable addresses, are refused naming spec.addresses.
func ValidateAddresses(p *lbv1alpha1.IPAddressPool, existing []lbv1alpha1.IPAddressPool) field.ErrorList {
	var errs field.ErrorList
	rs, _ := lbipam.ParseAddresses(p.Spec.Addresses)
	fp := field.NewPath("spec", "addresses")
	for _, a := range p.Status.Assignments {
		ip, err := netip.ParseAddr(a.Address)
		if err == nil && !lbipam.Usable(rs, p.Spec.AvoidBuggyIPs, ip) {
			errs = append(errs, field.Invalid(fp, p.Spec.Addresses,
				fmt.Sprintf("would drop address %s assigned to Service %s/%s; move or delete that Service first", a.Address, a.Service.Namespace, a.Service.Name)))
		}
	}
	for i := range existing {
		o := &existing[i]
		if o.Name == p.Name {
			continue
		}
		ors, err := lbipam.ParseAddresses(o.Spec.Addresses)
		if err != nil {
			continue
		}
		if x, y, ok := lbipam.Overlap(rs, ors); ok {
			errs = append(errs, field.Invalid(fp, p.Spec.Addresses,
				fmt.Sprintf("%s overlaps %s of IPAddressPool %q", x, y, o.Name)))
		}
	}
	return errs
}

// ValidatePoolSpec checks what the schema cannot: parsable, non-overlapping
// addresses and selectors.
func ValidatePoolSpec(spec *lbv1alpha1.IPAddressPoolSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, err := lbipam.ParseAddresses(spec.Addresses); err != nil {
		errs = append(errs, field.Invalid(p.Child("addresses"), spec.Addresses, err.Error()))
	}
	if sa := spec.ServiceAllocation; sa != nil {
		errs = append(errs, selectors(sa.NamespaceSelectors, p.Child("serviceAllocation", "namespaceSelectors"))...)
		errs = append(errs, selectors(sa.ServiceSelectors, p.Child("serviceAllocation", "serviceSelectors"))...)
	}
	return errs
}

func selectors(sels []metav1.LabelSelector, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i := range sels {
		if _, err := metav1.LabelSelectorAsSelector(&sels[i]); err != nil {
			errs = append(errs, field.Invalid(p.Index(i), sels[i], err.Error()))
		}
	}
	return errs
}

// L2Advertisement validates L2Advertisements.
type L2Advertisement struct{}

// SetupWithManager registers the webhook.
func (w L2Advertisement) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &lbv1alpha1.L2Advertisement{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new L2Advertisement.
func (L2Advertisement) ValidateCreate(_ context.Context, a *lbv1alpha1.L2Advertisement) (admission.Warnings, error) {
	return nil, specerr.Invalid(lbv1alpha1.GroupVersion, "L2Advertisement", a.Name, selectors(a.Spec.NodeSelectors, field.NewPath("spec", "nodeSelectors")))
}

// ValidateUpdate checks a changed L2Advertisement.
func (L2Advertisement) ValidateUpdate(_ context.Context, _, a *lbv1alpha1.L2Advertisement) (admission.Warnings, error) {
	return nil, specerr.Invalid(lbv1alpha1.GroupVersion, "L2Advertisement", a.Name, selectors(a.Spec.NodeSelectors, field.NewPath("spec", "nodeSelectors")))
}

// ValidateDelete allows every deletion.
func (L2Advertisement) ValidateDelete(context.Context, *lbv1alpha1.L2Advertisement) (admission.Warnings, error) {
	return nil, nil
}
