package ippool_test

import (
	"net/netip"
	"testing"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/ippool"
)

func parse(t *testing.T, start, end string, exclude ...string) *ippool.Pool {
	t.Helper()
	spec := dhcpv1alpha1.IPPoolSpec{NetworkName: "lan", IPv4Config: dhcpv1alpha1.IPv4Config{
		CIDR: "10.0.0.0/24", ServerIP: "10.0.0.2", Router: "10.0.0.1",
		Pool: dhcpv1alpha1.AddressRange{Start: start, End: end, Exclude: exclude},
	}}
	p, errs := ippool.Parse(&spec, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return p
}

// Counts, Next and StaticOK: the dynamic range skips excluded addresses;
// a static address outside the range counts as used, not against the
// range; static addresses may be anywhere in the CIDR but the network,
// broadcast, server and router addresses.
func TestCountsAndNext(t *testing.T) {
	p := parse(t, "10.0.0.10", "10.0.0.14", "10.0.0.12")
	if p.Size() != 4 {
		t.Fatalf("size %d, want 4", p.Size())
	}
	held := []dhcpv1alpha1.Allocation{
		{IP: "10.0.0.10", MACAddress: "02:00:00:00:00:01", Owner: "a"},
		{IP: "10.0.0.50", MACAddress: "02:00:00:00:00:02", Owner: "b", Static: true}, // outside the range
	}
	used, avail := p.Counts(held)
	if used != 2 || avail != 3 {
		t.Fatalf("counts %d/%d, want 2 used, 3 available", used, avail)
	}
	next, ok := p.Next(ippool.Held(held))
	if !ok || next != netip.MustParseAddr("10.0.0.11") {
		t.Fatalf("next %v %v", next, ok)
	}
	held = append(held, dhcpv1alpha1.Allocation{IP: "10.0.0.11"}, dhcpv1alpha1.Allocation{IP: "10.0.0.13"})
	if next, _ := p.Next(ippool.Held(held)); next != netip.MustParseAddr("10.0.0.14") {
		t.Fatalf("next %v, want 10.0.0.14 (10.0.0.12 is excluded)", next)
	}
	held = append(held, dhcpv1alpha1.Allocation{IP: "10.0.0.14"})
	if _, ok := p.Next(ippool.Held(held)); ok {
		t.Fatal("an exhausted range gave an address")
	}
	if _, avail := p.Counts(held); avail != 0 {
		t.Fatalf("available %d, want 0", avail)
	}
	for addr, ok := range map[string]bool{"10.0.0.50": true, "10.0.0.0": false, "10.0.0.255": false, "10.0.0.2": false, "10.0.0.1": false, "10.0.1.5": false} {
		if got := p.StaticOK(netip.MustParseAddr(addr)) == ""; got != ok {
			t.Errorf("StaticOK(%s) = %v, want %v", addr, got, ok)
		}
	}
}
