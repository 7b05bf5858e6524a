package dhcp

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/ippool"
)

func good() dhcpv1alpha1.IPPoolSpec {
	return dhcpv1alpha1.IPPoolSpec{NetworkName: "lan", IPv4Config: dhcpv1alpha1.IPv4Config{
		CIDR: "10.0.0.0/24", ServerIP: "10.0.0.2", Router: "10.0.0.1",
		Pool: dhcpv1alpha1.AddressRange{Start: "10.0.0.100", End: "10.0.0.200"},
	}}
}

func TestPoolSpec(t *testing.T) {
	for _, c := range []struct {
		name string
		mut  func(s *dhcpv1alpha1.IPPoolSpec)
		want string // empty: valid
	}{
		{"valid", func(*dhcpv1alpha1.IPPoolSpec) {}, ""},
		{"start outside cidr", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.Pool.Start = "10.0.1.5" }, "spec.ipv4Config.pool.start"},
		{"end outside cidr", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.Pool.End = "10.0.1.5" }, "spec.ipv4Config.pool.end"},
		{"end before start", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.Pool.End = "10.0.0.50" }, "before pool.start"},
		{"server inside range", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.ServerIP = "10.0.0.150" }, "spec.ipv4Config.serverIP"},
		{"server inside range but excluded", func(s *dhcpv1alpha1.IPPoolSpec) {
			s.IPv4Config.ServerIP = "10.0.0.150"
			s.IPv4Config.Pool.Exclude = []string{"10.0.0.150"}
		}, ""},
		{"server outside cidr", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.ServerIP = "10.9.0.2" }, "spec.ipv4Config.serverIP"},
		{"router outside cidr", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.Router = "192.168.0.1" }, "spec.ipv4Config.router"},
		{"router inside range", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.Router = "10.0.0.101" }, "spec.ipv4Config.router"},
		{"four dns", func(s *dhcpv1alpha1.IPPoolSpec) {
			s.IPv4Config.DNS = []string{"1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"}
		}, "spec.ipv4Config.dns"},
		{"five ntp", func(s *dhcpv1alpha1.IPPoolSpec) {
			s.IPv4Config.NTP = []string{"1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4", "1.1.1.5"}
		}, "spec.ipv4Config.ntp"},
		{"host bits", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.CIDR = "10.0.0.1/24" }, "host bits"},
		{"bad domain", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.DomainSearch = []string{"a..b"} }, "spec.ipv4Config.domainSearch[0]"},
		{"broadcast start", func(s *dhcpv1alpha1.IPPoolSpec) { s.IPv4Config.Pool.End = "10.0.0.255" }, "broadcast"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := good()
			c.mut(&s)
			_, errs := ippool.Parse(&s, field.NewPath("spec"))
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

func TestMNCSpec(t *testing.T) {
	spec := dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: []dhcpv1alpha1.NetworkConfig{
		{NetworkName: "lan", MACAddress: "03:00:00:00:00:01"},
		{NetworkName: "lan", MACAddress: "02:00:00:00:00:02", IPAddress: "10.0.0.5"},
		{NetworkName: "wan", MACAddress: "02:00:00:00:00:03", IPAddress: "10.0.0.5"},
		{NetworkName: "wan", MACAddress: "02:00:00:00:00:04", IPAddress: "fd00::1"},
		{NetworkName: "wan", MACAddress: "0b:00:00:00:00:05"},
	}}
	msg := ValidateMNCSpec(&spec, field.NewPath("spec")).ToAggregate().Error()
	for _, want := range []string{"spec.networkConfigs[0].macAddress", "spec.networkConfigs[2].ipAddress", "spec.networkConfigs[3].ipAddress", "spec.networkConfigs[4].macAddress"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not mention %s", msg, want)
		}
	}
}
