package lbdataplane_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/netns"
)

// TestFlushStaleUDPTouchesOnlyItsOwn makes real UDP flows through a node:
// one through Converge's rules, one through another table's DNAT that even
// sets the same conntrack mark bit, one to a server on the node at the VIP. A sweep that keeps the Converge flow's
// endpoint deletes nothing; one that no longer lists it deletes exactly
// that flow; the other two survive every sweep.
func TestFlushStaleUDPTouchesOnlyItsOwn(t *testing.T) {
	lbtest.NeedNetwork(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.Close)
	node := topo.Nodes[0]
	for i, be := range topo.Backends {
		if err := topo.ServeUDPEcho(be, topo.BackendIPs[i].String()+":5353", be); err != nil {
			t.Fatal(err)
		}
	}
	vip, foreign := netip.MustParseAddr("10.77.0.200"), netip.MustParseAddr("10.77.0.201")
	be0 := netip.AddrPortFrom(topo.BackendIPs[0], 5353)
	svc := lbdataplane.Service{Name: "ns/dns", VIP: vip, Ports: []lbdataplane.Port{
		{Protocol: "udp", Port: 53, Endpoints: []netip.AddrPort{be0}}}}
	if err := (lbdataplane.NFT{NetNS: node}).Apply(ctx, lbdataplane.Render([]lbdataplane.Service{svc})); err != nil {
		t.Fatal(err)
	}
	if err := (lbdataplane.Addresses{NetNS: node}).Add(ctx, vip); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.Run(ctx, node, "ip", "addr", "add", foreign.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.Run(ctx, node, "nft", "add table ip other; add chain ip other pre { type nat hook prerouting priority -110; };"+
		" add rule ip other pre ip daddr "+foreign.String()+" udp dport 53 ct mark set ct mark | 0x4000 dnat ip to "+topo.BackendIPs[1].String()+":5353"); err != nil {
		t.Fatal(err)
	}
	// And a flow no rule translated: to a server on the node itself, on
	// the VIP's address but a port no Service has.
	if err := topo.ServeUDPEcho(node, vip.String()+":54", "node"); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{vip.String() + ":53", foreign.String() + ":53", vip.String() + ":54"} {
		if reply, err := lbtest.UDP(topo.Client, to, "q", 2*time.Second); err != nil {
			t.Fatalf("UDP to %s: %q, %v", to, reply, err)
		}
	}
	flows := func() map[netip.AddrPort]int {
		var c *conntrack.Conn
		if err := netns.Do(node, func() (err error) { c, err = conntrack.Dial(nil); return err }); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		all, err := c.Dump(nil)
		if err != nil {
			t.Fatal(err)
		}
		n := map[netip.AddrPort]int{}
		for _, f := range all {
			if f.TupleOrig.Proto.Protocol == unix.IPPROTO_UDP {
				n[netip.AddrPortFrom(f.TupleOrig.IP.DestinationAddress, f.TupleOrig.Proto.DestinationPort)]++
			}
		}
		return n
	}
	toVIP, toForeign, toNode := netip.AddrPortFrom(vip, 53), netip.AddrPortFrom(foreign, 53), netip.AddrPortFrom(vip, 54)
	if got := flows(); got[toVIP] != 1 || got[toForeign] != 1 || got[toNode] != 1 {
		t.Fatalf("UDP flows before any sweep: %v; want one to each of %s, %s, %s", got, toVIP, toForeign, toNode)
	}
	// The other table's flow carries the mark and was translated: only the
	// addresses the sweep is given (the agent's) protect it.
	ct := lbdataplane.Conntrack{NetNS: node}
	if n, err := ct.FlushStaleUDP([]lbdataplane.Service{svc}, []netip.Addr{vip}); err != nil || n != 0 {
		t.Fatalf("sweep with the flow's endpoint kept: %d deleted, %v; want 0", n, err)
	}
	moved := svc
	moved.Ports = []lbdataplane.Port{{Protocol: "udp", Port: 53, Draining: []netip.AddrPort{be0}}}
	if n, err := ct.FlushStaleUDP([]lbdataplane.Service{moved}, []netip.Addr{vip}); err != nil || n != 0 {
		t.Fatalf("sweep with the flow's endpoint draining: %d deleted, %v; want 0", n, err)
	}
	moved.Ports = []lbdataplane.Port{{Protocol: "udp", Port: 53, Endpoints: []netip.AddrPort{netip.AddrPortFrom(topo.BackendIPs[1], 5353)}}}
	if n, err := ct.FlushStaleUDP([]lbdataplane.Service{moved}, []netip.Addr{vip}); err != nil || n != 1 {
		t.Fatalf("sweep without the flow's endpoint: %d deleted, %v; want 1", n, err)
	}
	if got := flows(); got[toVIP] != 0 || got[toForeign] != 1 || got[toNode] != 1 {
		t.Fatalf("UDP flows after the sweep: %v; want none to %s, the other table's to %s and the untranslated one to %s kept", got, toVIP, toForeign, toNode)
	}
}
