package lbdataplane_test

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/netns"
)

// TestDataPlaneRealTraffic programs a node namespace by hand and sends real
// TCP and UDP from a client namespace through the VIP: ARP, DNAT, spreading
// over endpoints, masquerade and the return path are the kernel's.
func TestDataPlaneRealTraffic(t *testing.T) {
	lbtest.NeedNetwork(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.Close)
	node := topo.Nodes[0]
	for i, be := range topo.Backends {
		if err := topo.ServeHTTP(be, topo.BackendIPs[i].String()+":8080", be); err != nil {
			t.Fatal(err)
		}
		if err := topo.ServeUDPEcho(be, topo.BackendIPs[i].String()+":5353", be); err != nil {
			t.Fatal(err)
		}
	}
	// A table someone else owns must survive every apply and the delete.
	if _, err := netns.Run(ctx, node, "nft", "add table ip foreign; add chain ip foreign c { type filter hook input priority 0; }; add rule ip foreign c counter"); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("10.77.0.200")
	svc := lbdataplane.Service{Name: "ns/web", VIP: vip, Ports: []lbdataplane.Port{
		{Protocol: "tcp", Port: 80, Endpoints: []netip.AddrPort{
			netip.AddrPortFrom(topo.BackendIPs[0], 8080), netip.AddrPortFrom(topo.BackendIPs[1], 8080)}},
		{Protocol: "udp", Port: 53, Endpoints: []netip.AddrPort{netip.AddrPortFrom(topo.BackendIPs[1], 5353)}},
	}}
	nft := lbdataplane.NFT{NetNS: node}
	addrs := lbdataplane.Addresses{NetNS: node}
	for range 2 { // applying twice replaces, never duplicates
		if err := nft.Apply(ctx, lbdataplane.Render([]lbdataplane.Service{svc})); err != nil {
			t.Fatal(err)
		}
	}
	if err := addrs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := addrs.Add(ctx, vip); err != nil {
		t.Fatal(err)
	}
	if err := lbdataplane.GratuitousARP(node, "eth0", vip); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range 40 {
		body, err := lbtest.Get(ctx, topo.Client, vip.String()+":80", 2*time.Second)
		if err != nil {
			t.Fatalf("GET through the VIP: %v", err)
		}
		seen[body]++
	}
	if len(seen) != 2 {
		t.Fatalf("40 new connections reached %v; want both backends", seen)
	}
	reply, err := lbtest.UDP(topo.Client, vip.String()+":53", "ping", 2*time.Second)
	if err != nil || reply != topo.Backends[1]+":ping" {
		t.Fatalf("UDP through the VIP: %q, %v", reply, err)
	}
	// Client-IP affinity: one client, one backend.
	svc.ClientIPAffinity = true
	if err := nft.Apply(ctx, lbdataplane.Render([]lbdataplane.Service{svc})); err != nil {
		t.Fatal(err)
	}
	sticky := map[string]int{}
	for range 20 {
		body, err := lbtest.Get(ctx, topo.Client, vip.String()+":80", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sticky[body]++
	}
	if len(sticky) != 1 {
		t.Fatalf("sessionAffinity ClientIP spread one client over %v", sticky)
	}
	if err := nft.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lbtest.Get(ctx, topo.Client, vip.String()+":80", time.Second); err == nil {
		t.Fatal("the VIP still served after the table was deleted")
	}
	out, err := netns.Run(ctx, node, "nft", "list", "tables")
	if err != nil || !strings.Contains(string(out), "table ip foreign") || strings.Contains(string(out), lbdataplane.Table) {
		t.Fatalf("tables after delete: %s (%v); want foreign kept and %s gone", out, err, lbdataplane.Table)
	}
	// Several addresses in one batch (a take-over), the one already there
	// included; Delete removes exactly the agent's.
	more := []netip.Addr{vip, netip.MustParseAddr("10.77.0.241"), netip.MustParseAddr("10.77.0.242")}
	if err := addrs.Add(ctx, more...); err != nil {
		t.Fatal(err)
	}
	if got, err := addrs.List(ctx); err != nil || !slices.Equal(sorted(got), sorted(more)) {
		t.Fatalf("addresses after a batch add: %v (%v); want %v", got, err, more)
	}
	if err := addrs.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := addrs.List(ctx); err != nil || len(got) != 0 {
		t.Fatalf("addresses after Delete: %v (%v); want none", got, err)
	}
	prefix := topo.Prefix()
	topo.Close()
	entries, _ := os.ReadDir(netns.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
}

func sorted(ips []netip.Addr) []netip.Addr {
	ips = slices.Clone(ips)
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}
