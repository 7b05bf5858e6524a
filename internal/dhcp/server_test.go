package dhcp_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/converge-dev/converge/internal/dhcp"
	"github.com/converge-dev/converge/internal/dhcp/dhcptest"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/testenv"
)

const (
	macA = "02:00:00:00:0a:01"
	macB = "02:00:00:00:0a:02"
)

func opts(leaseTime time.Duration) *dhcp.Options {
	return &dhcp.Options{
		Pool:         "ns/lan",
		Server:       netip.MustParseAddr("10.66.0.2"),
		Prefix:       netip.MustParsePrefix("10.66.0.0/24"),
		Router:       netip.MustParseAddr("10.66.0.1"),
		DNS:          []netip.Addr{netip.MustParseAddr("10.66.0.53"), netip.MustParseAddr("10.66.0.54")},
		NTP:          []netip.Addr{netip.MustParseAddr("10.66.0.123")},
		DomainName:   "lab.example",
		DomainSearch: []string{"lab.example", "example"},
		LeaseTime:    leaseTime,
	}
}

func table(o *dhcp.Options) *dhcp.Table {
	return dhcp.NewTable([]*dhcp.Options{o}, map[string]dhcp.Lease{
		macA: {IP: netip.MustParseAddr("10.66.0.100"), Hostname: "vm-a", Options: o},
	})
}

func discover(t *testing.T, mac string) *dhcpv4.DHCPv4 {
	t.Helper()
	hw, _ := net.ParseMAC(mac)
	m, err := dhcpv4.NewDiscovery(hw)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The protocol, without sockets: offers and acks only what the table
// holds, NAKs a wrong address, stays silent for unknown MACs and other
// servers, answers INFORM without a lease time, and forgets a released or
// declined binding.
func TestHandle(t *testing.T) {
	o := opts(time.Hour)
	s := &dhcp.Server{}
	s.SetTable(table(o))

	if r := s.Handle(discover(t, macB)); r != nil {
		t.Fatalf("unknown MAC got %s", r.Summary())
	}
	offer := s.Handle(discover(t, macA))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer || offer.YourIPAddr.String() != "10.66.0.100" {
		t.Fatalf("offer = %v", offer)
	}
	for _, c := range []dhcpv4.OptionCode{dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
		dhcpv4.OptionHostName, dhcpv4.OptionDomainName, dhcpv4.OptionNTPServers, dhcpv4.OptionIPAddressLeaseTime,
		dhcpv4.OptionServerIdentifier, dhcpv4.OptionDNSDomainSearchList} {
		if offer.Options.Get(c) == nil {
			t.Errorf("offer lacks option %s", c)
		}
	}
	if got := offer.DomainSearch(); got == nil || strings.Join(got.Labels, ",") != "lab.example,example" {
		t.Errorf("domain search = %v", got)
	}
	req, err := dhcpv4.NewRequestFromOffer(offer)
	if err != nil {
		t.Fatal(err)
	}
	ack := s.Handle(req)
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck || ack.IPAddressLeaseTime(0) != time.Hour {
		t.Fatalf("ack = %v", ack)
	}
	if b := s.Bindings()[macA]; b.IP.String() != "10.66.0.100" {
		t.Fatalf("bindings = %v", s.Bindings())
	}

	// Another server's offer was chosen: silence.
	other := req.ToBytes()
	m, _ := dhcpv4.FromBytes(other)
	m.UpdateOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 66, 0, 9)))
	if r := s.Handle(m); r != nil {
		t.Fatalf("request to another server answered: %s", r.Summary())
	}
	// INIT-REBOOT with a wrong address: NAK.
	m, _ = dhcpv4.FromBytes(other)
	m.Options.Del(dhcpv4.OptionServerIdentifier)
	m.UpdateOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 66, 0, 101)))
	if r := s.Handle(m); r == nil || r.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("wrong address: %v, want NAK", r)
	}
	// RENEWING (ciaddr): ACK.
	m, _ = dhcpv4.FromBytes(other)
	m.Options.Del(dhcpv4.OptionServerIdentifier)
	m.Options.Del(dhcpv4.OptionRequestedIPAddress)
	m.ClientIPAddr = net.IPv4(10, 66, 0, 100)
	if r := s.Handle(m); r == nil || r.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("renewal: %v, want ACK", r)
	}
	// INFORM from an address of the subnet: options, no lease time.
	inf, _ := dhcpv4.FromBytes(other)
	inf.UpdateOption(dhcpv4.OptMessageType(dhcpv4.MessageTypeInform))
	inf.ClientIPAddr = net.IPv4(10, 66, 0, 7)
	r := s.Handle(inf)
	if r == nil || r.MessageType() != dhcpv4.MessageTypeAck || r.Options.Get(dhcpv4.OptionIPAddressLeaseTime) != nil || r.Router() == nil {
		t.Fatalf("inform: %v", r)
	}
	// DECLINE, then RELEASE: the binding goes.
	dec, _ := dhcpv4.FromBytes(other)
	dec.UpdateOption(dhcpv4.OptMessageType(dhcpv4.MessageTypeDecline))
	if r := s.Handle(dec); r != nil || len(s.Bindings()) != 0 {
		t.Fatalf("decline: answer %v, bindings %v", r, s.Bindings())
	}
	_ = s.Handle(req)
	rel, _ := dhcpv4.FromBytes(other)
	rel.UpdateOption(dhcpv4.OptMessageType(dhcpv4.MessageTypeRelease))
	rel.ClientIPAddr = net.IPv4(10, 66, 0, 100)
	if r := s.Handle(rel); r != nil || len(s.Bindings()) != 0 {
		t.Fatalf("release: answer %v, bindings %v", r, s.Bindings())
	}
}

// FuzzHandle feeds arbitrary packets through the library's parser and the
// agent: it never panics, and never answers with an address the table does
// not hold for that MAC.
func FuzzHandle(f *testing.F) {
	hw, _ := net.ParseMAC(macA)
	d, _ := dhcpv4.NewDiscovery(hw)
	f.Add(d.ToBytes())
	rq, _ := dhcpv4.NewRequestFromOffer(func() *dhcpv4.DHCPv4 {
		s := &dhcp.Server{}
		s.SetTable(table(opts(time.Minute)))
		return s.Handle(d)
	}())
	f.Add(rq.ToBytes())
	s := &dhcp.Server{}
	s.SetTable(table(opts(time.Minute)))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		r := s.Handle(m)
		if r == nil || r.MessageType() == dhcpv4.MessageTypeNak {
			return
		}
		if r.YourIPAddr.IsUnspecified() {
			return // INFORM
		}
		l, ok := s.Table().Lookup(m.ClientHWAddr.String())
		if !ok || !net.IP(l.IP.AsSlice()).Equal(r.YourIPAddr) {
			t.Fatalf("answered %s to %s, which holds %v", r.YourIPAddr, m.ClientHWAddr, l.IP)
		}
		if _, err := dhcpv4.FromBytes(r.ToBytes()); err != nil {
			t.Fatalf("the answer does not parse: %v", err)
		}
	})
}

// needClient skips outside CI when the client is missing.
func needClient(t *testing.T, bin string) {
	t.Helper()
	testenv.NeedRoot(t, "DHCP client test", "network namespaces")
	if _, err := exec.LookPath(bin); err != nil {
		testenv.NeedPeer(t, "DHCP client test", bin+" is not installed (apt-get install udhcpc isc-dhcp-client dhcpcd-base)")
	}
}

// serve starts the agent on a fresh bridge with the table.
func serve(t *testing.T, tb *dhcp.Table) (*dhcptest.Net, *dhcp.Server) {
	t.Helper()
	n, err := dhcptest.New(t.Context(), "cvb-lan", netip.MustParsePrefix("10.66.0.2/24"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	s := &dhcp.Server{Interface: n.Bridge, Netns: n.Netns, Observe: func(typ string, d time.Duration) { t.Logf("served %s in %s", typ, d) }}
	s.SetTable(tb)
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return n, s
}

func wantVars(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("client wrote %s=%q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// udhcpc gets the allocated address and every option, and at its renewal
// (half the 10 s lease) learns a router changed meanwhile; released, it
// no longer holds a binding; an unknown MAC gets nothing.
func TestUdhcpc(t *testing.T) {
	needClient(t, "udhcpc")
	ctx := t.Context()
	o := opts(10 * time.Second)
	n, s := serve(t, table(o))
	ns, err := n.AddClient(ctx, macA)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dhcptest.Udhcpc(ctx, ns, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ev, seen, err := c.WaitEvent(ctx, 0, 20*time.Second, "bound")
	if err != nil {
		t.Fatal(err)
	}
	wantVars(t, ev.Vars, map[string]string{
		"ip": "10.66.0.100", "mask": "24", "router": "10.66.0.1", "dns": "10.66.0.53 10.66.0.54",
		"domain": "lab.example", "search": "lab.example example", "ntpsrv": "10.66.0.123",
		"lease": "10", "serverid": "10.66.0.2", "hostname": "vm-a",
	})

	// The pool's router changes; the next renewal carries it.
	o2 := *o
	o2.Router = netip.MustParseAddr("10.66.0.254")
	s.SetTable(table(&o2))
	ev, _, err = c.WaitEvent(ctx, seen, 25*time.Second, "renew")
	if err != nil {
		a, _ := netns.Run(ctx, ns, "ip", "addr", "show", "eth0")
		b, _ := netns.Run(ctx, n.Netns, "ip", "neigh")
		r, _ := netns.Run(ctx, ns, "ip", "route")
		t.Fatalf("%v\n%s\n%s\n%s", err, a, b, r)
	}
	wantVars(t, ev.Vars, map[string]string{"ip": "10.66.0.100", "router": "10.66.0.254"})
	if testing.Verbose() {
		evs, _ := c.Events()
		for _, e := range evs {
			t.Logf("udhcpc %s at %s", e.Reason, e.Vars["at"])
		}
	}

	// Release (SIGUSR2): the agent drops the binding.
	if err := c.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Bindings()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("binding not released: %v", s.Bindings())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// An unknown MAC gets no lease.
	nsB, err := n.AddClient(ctx, macB)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := dhcptest.Udhcpc(ctx, nsB, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Stop()
	time.Sleep(4 * time.Second)
	evs, _ := cb.Events()
	for _, e := range evs {
		if e.Reason == "bound" {
			t.Fatalf("an unknown MAC got a lease: %v", e.Vars)
		}
	}
}

// dhclient gets the allocated address and every option; read from the
// lease file dhclient wrote.
func TestDhclient(t *testing.T) {
	needClient(t, "dhclient")
	ctx := t.Context()
	n, _ := serve(t, table(opts(10*time.Second)))
	ns, err := n.AddClient(ctx, macA)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dhcptest.Dhclient(ctx, ns, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if _, _, err := c.WaitEvent(ctx, 0, 30*time.Second, "BOUND", "REBOOT"); err != nil {
		t.Fatal(err)
	}
	lease, err := c.WaitLeaseFile(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"fixed-address 10.66.0.100;", "option subnet-mask 255.255.255.0;", "option routers 10.66.0.1;",
		"option domain-name-servers 10.66.0.53,10.66.0.54;", `option domain-name "lab.example";`,
		`option domain-search "lab.example.", "example.";`, "option ntp-servers 10.66.0.123;",
		"option dhcp-lease-time 10;", "option dhcp-server-identifier 10.66.0.2;", `option host-name "vm-a";`,
	} {
		if !strings.Contains(lease, want) {
			t.Errorf("dhclient's lease file lacks %q:\n%s", want, lease)
		}
	}
	if t.Failed() {
		_, _ = os.Stderr.WriteString(c.Log())
	}
}

// dhcpcd gets the allocated address and every option, although it
// identifies itself with a DUID-based client identifier: read from what
// dhcpcd passed its script, and from the address it put on the interface.
func TestDhcpcd(t *testing.T) {
	needClient(t, "dhcpcd")
	ctx := t.Context()
	n, _ := serve(t, table(opts(10*time.Second)))
	ns, err := n.AddClient(ctx, macA)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dhcptest.Dhcpcd(ctx, ns, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ev, _, err := c.WaitEvent(ctx, 0, 30*time.Second, "BOUND", "REBOOT")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"new_ip_address": "10.66.0.100", "new_subnet_mask": "255.255.255.0", "new_routers": "10.66.0.1",
		"new_domain_name_servers": "10.66.0.53 10.66.0.54", "new_domain_name": "lab.example",
		"new_domain_search": "lab.example example", "new_ntp_servers": "10.66.0.123",
		"new_dhcp_lease_time": "10", "new_dhcp_server_identifier": "10.66.0.2", "new_host_name": "vm-a",
	} {
		if got := ev.Vars[k]; got != want {
			t.Errorf("dhcpcd's %s = %q, want %q", k, got, want)
		}
	}
	out, err := netns.Run(ctx, ns, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(string(out), "10.66.0.100/24") {
		t.Errorf("eth0 after dhcpcd bound: %s (%v); want 10.66.0.100/24", out, err)
	}
	if t.Failed() {
		_, _ = os.Stderr.WriteString(c.Log())
	}
}
