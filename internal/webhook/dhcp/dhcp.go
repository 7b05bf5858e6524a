// Package dhcp holds the admission webhooks of the dhcp.converge.dev API
// group: an IPPool whose addresses do not fit its CIDR, that has too many
// DNS or NTP servers, or that overlaps another pool of the same network
// (in any namespace) is refused naming the field; a MachineNetworkConfig
// naming one MAC address or network twice, a static address that is not
// an IPv4 address, or one its pool does not give out (excluded, the
// server's, the router's), likewise.
package dhcp

import (
	"context"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/ippool"
	"github.com/converge-dev/converge/internal/webhook/specerr"
)

// +kubebuilder:webhook:path=/validate-dhcp-converge-dev-v1alpha1-ippool,mutating=false,failurePolicy=fail,sideEffects=None,groups=dhcp.converge.dev,resources=ippools,verbs=create;update,versions=v1alpha1,name=vippool.dhcp.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-dhcp-converge-dev-v1alpha1-machinenetworkconfig,mutating=false,failurePolicy=fail,sideEffects=None,groups=dhcp.converge.dev,resources=machinenetworkconfigs,verbs=create;update,versions=v1alpha1,name=vmachinenetworkconfig.dhcp.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// IPPool validates pools.
type IPPool struct {
	// Reader lists the other pools (overlap check). It is the manager's
	// cache: the ippool and dhcp-agent controllers watch every IPPool
	// already (IPPools are the admin's, so the informer stays small even
	// without them), so an AdmissionReview, which anyone reaching the
	// webhook port can post, costs no API request.
	Reader client.Reader
}

// SetupWithManager registers the webhook.
func (w IPPool) SetupWithManager(mgr ctrl.Manager) error {
	w.Reader = mgr.GetClient()
	return ctrl.NewWebhookManagedBy(mgr, &dhcpv1alpha1.IPPool{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new pool.
func (w IPPool) ValidateCreate(ctx context.Context, p *dhcpv1alpha1.IPPool) (admission.Warnings, error) {
	return nil, w.validate(ctx, p)
}

// ValidateUpdate checks a changed pool.
func (w IPPool) ValidateUpdate(ctx context.Context, _, p *dhcpv1alpha1.IPPool) (admission.Warnings, error) {
	return nil, w.validate(ctx, p)
}

// ValidateDelete allows every deletion.
func (IPPool) ValidateDelete(context.Context, *dhcpv1alpha1.IPPool) (admission.Warnings, error) {
	return nil, nil
}

func (w IPPool) validate(ctx context.Context, p *dhcpv1alpha1.IPPool) error {
	parsed, errs := ippool.Parse(&p.Spec, field.NewPath("spec"))
	if len(errs) == 0 {
		var list dhcpv1alpha1.IPPoolList
		if err := w.Reader.List(ctx, &list); err != nil {
			return apierrors.NewInternalError(fmt.Errorf("listing IPPools: %w", err))
		}
		errs = overlapping(p, parsed, list.Items)
	}
	return specerr.Invalid(dhcpv1alpha1.GroupVersion, "IPPool", p.Name, errs)
}

// overlapping refuses p, whose spec parsed to parsed, naming
// spec.ipv4Config.cidr once per pool of existing (the IPPools of every
// namespace) on the same network whose CIDR overlaps it; p itself and
// pools that do not parse are not counted.
func overlapping(p *dhcpv1alpha1.IPPool, parsed *ippool.Pool, existing []dhcpv1alpha1.IPPool) field.ErrorList {
	var errs field.ErrorList
	for i := range existing {
		o := &existing[i]
		if (o.Namespace == p.Namespace && o.Name == p.Name) || o.Spec.NetworkName != p.Spec.NetworkName {
			continue
		}
		op, oerrs := ippool.Parse(&o.Spec, field.NewPath("spec"))
		if len(oerrs) > 0 {
			continue
		}
		if ippool.Overlaps(parsed, op) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "ipv4Config", "cidr"), p.Spec.IPv4Config.CIDR,
				fmt.Sprintf("overlaps %s of IPPool %s/%s on network %q", o.Spec.IPv4Config.CIDR, o.Namespace, o.Name, o.Spec.NetworkName)))
		}
	}
	return errs
}

// MachineNetworkConfig validates MachineNetworkConfigs.
type MachineNetworkConfig struct {
	// Reader reads the IPPools of the config's namespace (a static address
	// the pool excludes, or that is its server, router, network or
	// broadcast address, is refused). The manager's cache; nil checks the
	// spec alone.
	Reader client.Reader
}

// SetupWithManager registers the webhook.
func (w MachineNetworkConfig) SetupWithManager(mgr ctrl.Manager) error {
	w.Reader = mgr.GetClient()
	return ctrl.NewWebhookManagedBy(mgr, &dhcpv1alpha1.MachineNetworkConfig{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new MachineNetworkConfig.
func (w MachineNetworkConfig) ValidateCreate(ctx context.Context, m *dhcpv1alpha1.MachineNetworkConfig) (admission.Warnings, error) {
	return nil, w.validate(ctx, m)
}

// ValidateUpdate checks a changed MachineNetworkConfig. Its pools are not
// consulted when the spec is unchanged: a stored config whose static
// address a pool excluded since is reported by the ippool controller
// (AddressUnavailable), and its finalizer must still come off.
func (w MachineNetworkConfig) ValidateUpdate(ctx context.Context, old, m *dhcpv1alpha1.MachineNetworkConfig) (admission.Warnings, error) {
	if old != nil && equality.Semantic.DeepEqual(old.Spec, m.Spec) {
		return nil, specerr.Invalid(dhcpv1alpha1.GroupVersion, "MachineNetworkConfig", m.Name, ValidateMNCSpec(&m.Spec, field.NewPath("spec")))
	}
	return nil, w.validate(ctx, m)
}

// ValidateDelete allows every deletion.
func (MachineNetworkConfig) ValidateDelete(context.Context, *dhcpv1alpha1.MachineNetworkConfig) (admission.Warnings, error) {
	return nil, nil
}

func (w MachineNetworkConfig) validate(ctx context.Context, m *dhcpv1alpha1.MachineNetworkConfig) error {
	errs := ValidateMNCSpec(&m.Spec, field.NewPath("spec"))
	if len(errs) == 0 && w.Reader != nil {
		var list dhcpv1alpha1.IPPoolList
		if err := w.Reader.List(ctx, &list, client.InNamespace(m.Namespace)); err != nil {
			return apierrors.NewInternalError(fmt.Errorf("listing IPPools: %w", err))
		}
		errs = StaticAllowed(&m.Spec, list.Items, field.NewPath("spec"))
	}
	return specerr.Invalid(dhcpv1alpha1.GroupVersion, "MachineNetworkConfig", m.Name, errs)
}

// StaticAllowed refuses, naming networkConfigs[i].ipAddress, a static
// address that a pool of its network (pools: the config's namespace's)
// whose CIDR holds it does not give out: excluded, its server or router,
// its network or broadcast address.
func StaticAllowed(spec *dhcpv1alpha1.MachineNetworkConfigSpec, pools []dhcpv1alpha1.IPPool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, nc := range spec.NetworkConfigs {
		ip, err := netip.ParseAddr(nc.IPAddress)
		if err != nil {
			continue
		}
		for j := range pools {
			if pools[j].Spec.NetworkName != nc.NetworkName {
				continue
			}
			pp, perrs := ippool.Parse(&pools[j].Spec, nil)
			if len(perrs) > 0 || !pp.CIDR.Contains(ip) {
				continue
			}
			if why := pp.StaticOK(ip); why != "" {
				errs = append(errs, field.Invalid(p.Child("networkConfigs").Index(i).Child("ipAddress"), nc.IPAddress,
					fmt.Sprintf("%s in IPPool %s", why, pools[j].Name)))
			}
			break
		}
	}
	return errs
}

// ValidateMNCSpec checks what the schema cannot: static addresses are IPv4
// and unique, a MAC is unicast.
func ValidateMNCSpec(spec *dhcpv1alpha1.MachineNetworkConfigSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	ips := map[string]int{}
	for i, nc := range spec.NetworkConfigs {
		fp := p.Child("networkConfigs").Index(i)
		if len(nc.MACAddress) == 17 && hexNibble(nc.MACAddress[1])&1 == 1 {
			errs = append(errs, field.Invalid(fp.Child("macAddress"), nc.MACAddress, "a multicast address; a NIC needs a unicast one"))
		}
		if nc.IPAddress == "" {
			continue
		}
		a, err := netip.ParseAddr(nc.IPAddress)
		if err != nil || !a.Is4() {
			errs = append(errs, field.Invalid(fp.Child("ipAddress"), nc.IPAddress, "not an IPv4 address"))
			continue
		}
		if j, dup := ips[a.String()]; dup {
			errs = append(errs, field.Duplicate(fp.Child("ipAddress"), fmt.Sprintf("%s (also networkConfigs[%d])", nc.IPAddress, j)))
		}
		ips[a.String()] = i
	}
	return errs
}

func hexNibble(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return 0
}
