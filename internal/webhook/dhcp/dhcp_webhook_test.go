package dhcp

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
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
	scheme := runtime.NewScheme()
	if err := dhcpv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	broken := pool("a", "broken", "lan", "10.0.0.0/24")
	broken.Spec.IPv4Config.CIDR = "10.0.0.1/24"
	for _, c := range []struct {
		name     string
		existing []client.Object
		want     string // empty: valid
	}{
		{"no other pool", nil, ""},
		{"itself", []client.Object{pool("a", "p", "lan", "10.0.0.0/24")}, ""},
		{"other network", []client.Object{pool("a", "q", "wan", "10.0.0.0/24")}, ""},
		{"disjoint", []client.Object{pool("a", "q", "lan", "10.1.0.0/24")}, ""},
		{"invalid stored pool", []client.Object{broken}, ""},
		{"same namespace", []client.Object{pool("a", "q", "lan", "10.0.0.0/24")}, "spec.ipv4Config.cidr"},
		{"same name elsewhere", []client.Object{pool("b", "p", "lan", "10.0.0.0/24")}, "IPPool b/p"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := IPPool{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(c.existing...).Build()}
			_, err := w.ValidateCreate(context.Background(), pool("a", "p", "lan", "10.0.0.0/24"))
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v does not mention %q", err, c.want)
			}
		})
	}
	t.Run("list fails", func(t *testing.T) {
		r := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
			List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
				return errors.New("down")
			},
		}).Build()
		_, err := IPPool{Reader: r}.ValidateUpdate(context.Background(), nil, pool("a", "p", "lan", "10.0.0.0/24"))
		if err == nil || !strings.Contains(err.Error(), "listing IPPools: down") {
			t.Fatalf("error %v does not say the list failed", err)
		}
	})
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
