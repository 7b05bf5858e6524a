package dhcpagent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
)

// TestTableServesTheFirstClaim: when two namespaces' pools of one network
// both hold a MAC address (two claims that raced past the ippool
// controller), the table serves the earlier claim, whichever namespace
// sorts first; equal claim times fall back to the namespace, so every
// agent decides the same.
func TestTableServesTheFirstClaim(t *testing.T) {
	const mac = "02:00:00:00:99:01"
	early, late := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	mk := func(ns, prefix string, at *metav1.Time) *dhcpv1alpha1.IPPool {
		return &dhcpv1alpha1.IPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lan"},
			Spec: dhcpv1alpha1.IPPoolSpec{NetworkName: "lan", IPv4Config: dhcpv1alpha1.IPv4Config{
				CIDR: prefix + ".0/24", ServerIP: prefix + ".2",
				Pool: dhcpv1alpha1.AddressRange{Start: prefix + ".10", End: prefix + ".20"},
			}},
			Status: dhcpv1alpha1.IPPoolStatus{IPv4: dhcpv1alpha1.IPv4Status{Allocated: []dhcpv1alpha1.Allocation{
				{IP: prefix + ".10", MACAddress: mac, Owner: "vm", ClaimedAt: at}}}},
		}
	}
	for _, c := range []struct {
		name   string
		pools  []*dhcpv1alpha1.IPPool
		wantIP string
	}{
		{"earlier namespace sorts first", []*dhcpv1alpha1.IPPool{mk("a", "10.9.1", &early), mk("z", "10.9.2", &late)}, "10.9.1.10"},
		{"earlier namespace sorts last", []*dhcpv1alpha1.IPPool{mk("a", "10.9.1", &late), mk("z", "10.9.2", &early)}, "10.9.2.10"},
		{"same time", []*dhcpv1alpha1.IPPool{mk("z", "10.9.2", &early), mk("a", "10.9.1", &early)}, "10.9.1.10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			table, _ := buildTable(c.pools, 0)
			l, ok := table.Lookup(mac)
			if !ok || l.IP.String() != c.wantIP {
				t.Fatalf("MAC %s is served %v (%v); want %s", mac, l.IP, ok, c.wantIP)
			}
			if _, _, ok := table.LookupIP(l.IP); !ok || table.Len() != 1 {
				t.Fatalf("the table holds %d leases; want only the first claim", table.Len())
			}
		})
	}
}
