package lbdataplane_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/netns"
)

// TestLongNamesLoad: Services whose namespace and name are both 63
// characters long (what Kubernetes allows) reach nftables only as comments
// of at most lbdataplane.MaxComment bytes, distinct for names sharing a
// long prefix; the real nft loads the table, and a short-named Service in
// the same table keeps serving. Without Comment the comment is 63+1+63+
// " tcp/65535" bytes and nft refuses the whole table.
func TestLongNamesLoad(t *testing.T) {
	lbtest.NeedNetwork(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.Close)
	node := topo.Nodes[0]
	if err := topo.ServeHTTP(topo.Backends[0], topo.BackendIPs[0].String()+":8080", "short"); err != nil {
		t.Fatal(err)
	}
	ns := strings.Repeat("n", 63)
	long1 := ns + "/" + strings.Repeat("s", 62) + "1"
	long2 := ns + "/" + strings.Repeat("s", 62) + "2"
	be := []netip.AddrPort{netip.AddrPortFrom(topo.BackendIPs[0], 8080)}
	short := netip.MustParseAddr("10.77.0.210")
	svcs := []lbdataplane.Service{
		{Name: "ns/web", VIP: short, Ports: []lbdataplane.Port{{Protocol: "tcp", Port: 80, Endpoints: be}}},
		{Name: long1, VIP: netip.MustParseAddr("10.77.0.211"), Ports: []lbdataplane.Port{{Protocol: "tcp", Port: 65535, Endpoints: be}}},
		{Name: long2, VIP: netip.MustParseAddr("10.77.0.212"), Ports: []lbdataplane.Port{{Protocol: "udp", Port: 65535, Endpoints: be}}},
	}
	c1, c2 := lbdataplane.Comment(long1, "tcp/65535"), lbdataplane.Comment(long2, "tcp/65535")
	if len(c1) > lbdataplane.MaxComment || c1 == c2 || !strings.HasPrefix(c1, ns) {
		t.Fatalf("comments %q and %q: want distinct, at most %d bytes, starting with the namespace", c1, c2, lbdataplane.MaxComment)
	}
	if got := lbdataplane.Comment("ns/web", "tcp/80"); got != "ns/web tcp/80" {
		t.Fatalf("a short name's comment is %q; want it unchanged", got)
	}
	nft := lbdataplane.NFT{NetNS: node}
	if err := nft.Apply(ctx, lbdataplane.Render(svcs)); err != nil {
		t.Fatalf("nft refused a table with 63-character names: %v", err)
	}
	out, err := netns.Run(ctx, node, "nft", "list", "table", "ip", lbdataplane.Table)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"ns/web tcp/80"`, lbdataplane.Comment(long1, "tcp/65535"), lbdataplane.Comment(long2, "udp/65535")} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the kernel's table has no comment %s:\n%s", want, out)
		}
	}
	addrs := lbdataplane.Addresses{NetNS: node}
	if err := addrs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := addrs.Add(ctx, short); err != nil {
		t.Fatal(err)
	}
	if err := lbdataplane.GratuitousARP(node, "eth0", short); err != nil {
		t.Fatal(err)
	}
	if body, err := lbtest.Get(ctx, topo.Client, short.String()+":80", 2*time.Second); err != nil || body != "short" {
		t.Fatalf("the short-named Service beside long names: %q, %v", body, err)
	}
}
