package dhcp

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/ippool"
)

func pool(ns, name, network, cidr string) *dhcpv1alpha1.IPPool {
	s := good()
	s.NetworkName = network
	if cidr != "10.0.0.0/24" {
		s.IPv4Config = dhcpv1alpha1.IPv4Config{CIDR: cidr, ServerIP: "10.1.0.2", Router: "10.1.0.1",
			Pool: dhcpv1alpha1.AddressRange{Start: "10.1.0.100", End: "10.1.0.200"}}
	}
	return &dhcpv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: s}
}

// TestPoolOverlap: a pool overlapping another of the same network, in any
// namespace, is refused naming spec.ipv4Config.cidr; the pool itself, other
// networks, disjoint CIDRs and invalid stored pools are not counted.
func TestPoolOverlap(t *testing.T) {
	broken := pool("a", "broken", "lan", "10.0.0.0/24")
	broken.Spec.IPv4Config.CIDR = "10.0.0.1/24"
	for _, c := range []struct {
		name     string
		existing []*dhcpv1alpha1.IPPool
		want     string // empty: valid
	}{
		{"no other pool", nil, ""},
		{"itself", []*dhcpv1alpha1.IPPool{pool("a", "p", "lan", "10.0.0.0/24")}, ""},
		{"other network", []*dhcpv1alpha1.IPPool{pool("a", "q", "wan", "10.0.0.0/24")}, ""},
		{"disjoint", []*dhcpv1alpha1.IPPool{pool("a", "q", "lan", "10.1.0.0/24")}, ""},
		{"invalid stored pool", []*dhcpv1alpha1.IPPool{broken}, ""},
		{"same namespace", []*dhcpv1alpha1.IPPool{pool("a", "q", "lan", "10.0.0.0/24")},
			`spec.ipv4Config.cidr: Invalid value: "10.0.0.0/24": overlaps 10.0.0.0/24 of IPPool a/q on network "lan"`},
		{"same name elsewhere", []*dhcpv1alpha1.IPPool{pool("b", "p", "lan", "10.0.0.0/24")}, "IPPool b/p"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := pool("a", "p", "lan", "10.0.0.0/24")
			parsed, errs := ippool.Parse(&p.Spec, field.NewPath("spec"))
			if len(errs) > 0 {
				t.Fatalf("the pool does not parse: %v", errs)
			}
			var existing []dhcpv1alpha1.IPPool
			for _, o := range c.existing {
				existing = append(existing, *o)
			}
			errs = overlapping(p, parsed, existing)
			if c.want == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), c.want) {
				t.Fatalf("errors %v do not mention %q", errs, c.want)
			}
		})
	}
}

// TestPoolInvalid: a pool whose spec does not parse is refused naming the
// field, before any other pool is listed (the webhook has no Reader here).
func TestPoolInvalid(t *testing.T) {
	p := pool("a", "p", "lan", "10.0.0.0/24")
	p.Spec.IPv4Config.CIDR = "10.0.0.1/24"
	for name, validate := range map[string]func() (admission.Warnings, error){
		"create": func() (admission.Warnings, error) { return IPPool{}.ValidateCreate(context.Background(), p) },
		"update": func() (admission.Warnings, error) { return IPPool{}.ValidateUpdate(context.Background(), nil, p) },
	} {
		t.Run(name, func(t *testing.T) {
			_, err := validate()
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.ipv4Config.cidr") {
				t.Fatalf("error %v is not an Invalid naming spec.ipv4Config.cidr", err)
			}
		})
	}
}

// TestMNCSpecValid: unicast MACs, distinct IPv4 addresses and configs
// without an address pass.
func TestMNCSpecValid(t *testing.T) {
	spec := dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: []dhcpv1alpha1.NetworkConfig{
		{NetworkName: "lan", MACAddress: "02:00:00:00:00:01"},
		{NetworkName: "lan", MACAddress: "0a:00:00:00:00:02", IPAddress: "10.0.0.5"},
		{NetworkName: "wan", MACAddress: "0e:00:00:00:00:03", IPAddress: "10.0.0.6"},
	}}
	if errs := ValidateMNCSpec(&spec, field.NewPath("spec")); len(errs) > 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
	_, err := MachineNetworkConfig{}.ValidateCreate(context.Background(), &dhcpv1alpha1.MachineNetworkConfig{Spec: spec})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
