// Package dhcp is Converge's DHCPv4 agent: a server on
// github.com/insomniacslk/dhcp (server4; the library parses and encodes
// every packet) that answers only for addresses recorded in IPPool status.
//
// The agent holds a [Table] of leases (MAC → address and the pool's
// options) built from the API server's allocations and swapped atomically
// whenever a pool changes. It never allocates: an unknown MAC address gets
// no answer at all (no dynamic leases), so every address a client holds was
// durable in the API server before it was offered. Because every answer is
// built from the current table, a pool change (router, DNS, lease time)
// reaches a client at its next renewal; because the table lives in memory,
// the agent keeps answering renewals while the API server is unreachable.
package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/rfc1035label"

	"github.com/converge-dev/converge/internal/netns"
)

// Options are what the agent tells a client about its network: one
// IPPool's ipv4Config.
type Options struct {
	// Pool is "namespace/name" of the IPPool, for logs and metrics.
	Pool         string
	Server       netip.Addr
	Prefix       netip.Prefix
	Router       netip.Addr
	DNS          []netip.Addr
	NTP          []netip.Addr
	DomainName   string
	DomainSearch []string
	LeaseTime    time.Duration
	// Namespace is the IPPool's namespace: the network boot server boots
	// only that namespace's Machines.
	Namespace string
	// NetBootPort is the port of the network boot HTTP server on Server
	// when the pool has network boot enabled; 0 disables network boot.
	NetBootPort int
}

// Lease is one allocation: the address of a MAC address and its pool's
// options.
type Lease struct {
	IP       netip.Addr
	Hostname string
	Options  *Options
}

// Table is the agent's immutable view of the allocations of one network.
type Table struct {
	byMAC map[string]Lease
	byIP  map[netip.Addr]string
	pools []*Options
}

// NewTable builds a table; macs are lowercase colon-separated.
func NewTable(pools []*Options, leases map[string]Lease) *Table {
	t := &Table{byMAC: make(map[string]Lease, len(leases)), byIP: make(map[netip.Addr]string, len(leases)), pools: pools}
	for mac, l := range leases {
		t.byMAC[strings.ToLower(mac)] = l
		t.byIP[l.IP] = strings.ToLower(mac)
	}
	return t
}

// LookupIP returns the MAC address holding ip, and its lease.
func (t *Table) LookupIP(ip netip.Addr) (string, Lease, bool) {
	if t == nil {
		return "", Lease{}, false
	}
	mac, ok := t.byIP[ip]
	if !ok {
		return "", Lease{}, false
	}
	return mac, t.byMAC[mac], true
}

// Lookup returns the lease of mac.
func (t *Table) Lookup(mac string) (Lease, bool) {
	if t == nil {
		return Lease{}, false
	}
	l, ok := t.byMAC[strings.ToLower(mac)]
	return l, ok
}

// Len is the number of leases.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byMAC)
}

// Pools returns the pools' options.
func (t *Table) Pools() []*Options {
	if t == nil {
		return nil
	}
	return t.pools
}

// poolOf returns the pool whose subnet holds ip (INFORM).
func (t *Table) poolOf(ip netip.Addr) *Options {
	if t == nil {
		return nil
	}
	for _, p := range t.pools {
		if p.Prefix.Contains(ip) {
			return p
		}
	}
	return nil
}

// Binding is a lease a client holds (it was ACKed and not released).
type Binding struct {
	IP      netip.Addr
	Expires time.Time
}

// Server answers DHCPv4 on one interface.
type Server struct {
	// Interface is the interface to serve on (the network's bridge).
	Interface string
	// Netns is the network namespace holding Interface ("" for the
	// current one).
	Netns string
	// Port is the server port; 0 is 67 (tests and benchmarks use 67).
	Port int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Observe, when set, is called for each request handled with its
	// message type and the time spent.
	Observe func(msgType string, d time.Duration)

	table atomic.Pointer[Table]
	mu    sync.Mutex
	bound map[string]Binding
	srv   *server4.Server
}

// SetTable replaces the allocations served.
func (s *Server) SetTable(t *Table) { s.table.Store(t) }

// Table returns the allocations served.
func (s *Server) Table() *Table { return s.table.Load() }

// Bindings returns the leases clients hold, by MAC address.
func (s *Server) Bindings() map[string]Binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Binding, len(s.bound))
	now := s.now()
	for k, v := range s.bound {
		if v.Expires.After(now) {
			out[k] = v
		}
	}
	return out
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Start opens the socket (inside Netns, bound to Interface) and serves
// until ctx ends or Close is called. It returns once the socket is open.
func (s *Server) Start(ctx context.Context) error {
	port := s.Port
	if port == 0 {
		port = dhcpv4.ServerPort
	}
	var conn *net.UDPConn
	if err := netns.Do(s.Netns, func() (err error) {
		conn, err = server4.NewIPv4UDPConn(s.Interface, &net.UDPAddr{IP: net.IPv4zero, Port: port})
		return err
	}); err != nil {
		return fmt.Errorf("opening the DHCP socket on %s (netns %q): %w", s.Interface, s.Netns, err)
	}
	srv, err := server4.NewServer(s.Interface, nil, s.serve, server4.WithConn(conn))
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("starting the DHCP server on %s: %w", s.Interface, err)
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve() }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}

// Close stops serving.
func (s *Server) Close() error {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

func (s *Server) serve(conn net.PacketConn, peer net.Addr, req *dhcpv4.DHCPv4) {
	start := time.Now()
	resp := s.Handle(req)
	if s.Observe != nil {
		s.Observe(req.MessageType().String(), time.Since(start))
	}
	if resp == nil {
		return
	}
	to := peer
	if up, ok := peer.(*net.UDPAddr); ok {
		switch {
		case !req.GatewayIPAddr.IsUnspecified() && req.GatewayIPAddr != nil:
			to = &net.UDPAddr{IP: req.GatewayIPAddr, Port: dhcpv4.ServerPort}
		case resp.MessageType() == dhcpv4.MessageTypeNak:
			to = &net.UDPAddr{IP: net.IPv4bcast, Port: up.Port}
		}
	}
	_, _ = conn.WriteTo(resp.ToBytes(), to)
}

// Handle answers one request, or returns nil for no answer. It is the whole
// protocol logic; Start only moves packets.
func (s *Server) Handle(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	if req == nil || req.OpCode != dhcpv4.OpcodeBootRequest || len(req.ClientHWAddr) != 6 {
		return nil
	}
	mac := req.ClientHWAddr.String()
	t := s.table.Load()
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		l, ok := t.Lookup(mac)
		if !ok {
			return nil
		}
		return s.reply(req, dhcpv4.MessageTypeOffer, l)
	case dhcpv4.MessageTypeRequest:
		return s.request(req, mac, t)
	case dhcpv4.MessageTypeRelease:
		s.unbind(mac, req.ClientIPAddr)
		return nil
	case dhcpv4.MessageTypeDecline:
		// The client found the address in use on the wire: stop binding it
		// to this client; the allocation stays in the API server, where a
		// person sees both holders.
		s.unbind(mac, req.RequestedIPAddress())
		return nil
	case dhcpv4.MessageTypeInform:
		ip, ok := netip.AddrFromSlice(req.ClientIPAddr.To4())
		if !ok {
			return nil
		}
		p := t.poolOf(ip)
		if p == nil {
			return nil
		}
		resp, err := dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(dhcpv4.MessageTypeAck))
		if err != nil {
			return nil
		}
		addOptions(resp, p, "", false)
		return resp
	}
	return nil
}

// request handles REQUEST in its three states (RFC 2131 4.3.2): SELECTING
// (server identifier set), INIT-REBOOT (requested address, no ciaddr) and
// RENEWING/REBINDING (ciaddr set).
func (s *Server) request(req *dhcpv4.DHCPv4, mac string, t *Table) *dhcpv4.DHCPv4 {
	l, ok := t.Lookup(mac)
	if sid := req.ServerIdentifier(); sid != nil && !sid.IsUnspecified() {
		if !ok || !net.IP(l.Options.Server.AsSlice()).Equal(sid) {
			return nil // the client chose another server
		}
	}
	if !ok {
		return nil // not ours: another server may know the client
	}
	want := req.RequestedIPAddress()
	if want == nil || want.IsUnspecified() {
		want = req.ClientIPAddr
	}
	ip, valid := netip.AddrFromSlice(want.To4())
	if !valid || ip != l.IP {
		return s.nak(req, l, fmt.Sprintf("address %s is not yours; yours is %s", want, l.IP))
	}
	resp := s.reply(req, dhcpv4.MessageTypeAck, l)
	if resp != nil {
		s.mu.Lock()
		if s.bound == nil {
			s.bound = map[string]Binding{}
		}
		s.bound[mac] = Binding{IP: l.IP, Expires: s.now().Add(l.Options.LeaseTime)}
		s.mu.Unlock()
	}
	return resp
}

func (s *Server) unbind(mac string, ip net.IP) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.bound[mac]; ok && (ip == nil || ip.IsUnspecified() || net.IP(b.IP.AsSlice()).Equal(ip)) {
		delete(s.bound, mac)
	}
}

func (s *Server) nak(req *dhcpv4.DHCPv4, l Lease, msg string) *dhcpv4.DHCPv4 {
	resp, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(l.Options.Server.AsSlice())),
		dhcpv4.WithOption(dhcpv4.OptMessage(msg)),
	)
	if err != nil {
		return nil
	}
	resp.ClientIPAddr, resp.YourIPAddr = net.IPv4zero, net.IPv4zero
	return resp
}

func (s *Server) reply(req *dhcpv4.DHCPv4, typ dhcpv4.MessageType, l Lease) *dhcpv4.DHCPv4 {
	resp, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithYourIP(l.IP.AsSlice()),
	)
	if err != nil {
		return nil
	}
	addOptions(resp, l.Options, l.Hostname, true)
	if l.Options.NetBootPort != 0 && IsIPXE(req) {
		url := BootScriptURL(l.Options.Server, l.Options.NetBootPort, req.ClientHWAddr.String())
		resp.UpdateOption(dhcpv4.OptBootFileName(url))
		resp.BootFileName = url
	}
	return resp
}

// IsIPXE says whether req comes from iPXE: it sends the user class (option
// 77) "iPXE", and its own encapsulated options (175). A firmware's PXE
// ROM that is not iPXE, and the DHCP clients of operating systems
// (udhcpc, dhclient), send neither.
func IsIPXE(req *dhcpv4.DHCPv4) bool {
	if req.Options.Has(dhcpv4.OptionEtherboot) {
		return true
	}
	for _, uc := range req.UserClass() {
		if uc == "iPXE" {
			return true
		}
	}
	return false
}

// BootScriptURL is the boot file (option 67) an iPXE client of a network
// boot pool gets: its boot script on the pool's network boot server.
func BootScriptURL(server netip.Addr, port int, mac string) string {
	return fmt.Sprintf("http://%s/boot/%s.ipxe", netip.AddrPortFrom(server, uint16(port)), strings.ToLower(mac)) //nolint:gosec // ports are validated by the flag
}

// addOptions sets options 1, 3, 6, 12, 15, 42, 51, 54 and 119 from the
// pool; lease is false for INFORM (no lease time, RFC 2131 4.3.5).
func addOptions(resp *dhcpv4.DHCPv4, o *Options, hostname string, lease bool) {
	ips := func(as []netip.Addr) []net.IP {
		out := make([]net.IP, 0, len(as))
		for _, a := range as {
			out = append(out, a.AsSlice())
		}
		return out
	}
	resp.UpdateOption(dhcpv4.OptServerIdentifier(o.Server.AsSlice()))
	resp.ServerIPAddr = o.Server.AsSlice()
	resp.UpdateOption(dhcpv4.OptSubnetMask(net.CIDRMask(o.Prefix.Bits(), 32)))
	if o.Router.IsValid() {
		resp.UpdateOption(dhcpv4.OptRouter(o.Router.AsSlice()))
	}
	if len(o.DNS) > 0 {
		resp.UpdateOption(dhcpv4.OptDNS(ips(o.DNS)...))
	}
	if len(o.NTP) > 0 {
		resp.UpdateOption(dhcpv4.OptNTPServers(ips(o.NTP)...))
	}
	if hostname != "" {
		resp.UpdateOption(dhcpv4.OptHostName(hostname))
	}
	if o.DomainName != "" {
		resp.UpdateOption(dhcpv4.OptDomainName(o.DomainName))
	}
	if len(o.DomainSearch) > 0 {
		resp.UpdateOption(dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: o.DomainSearch}))
	}
	if lease {
		resp.UpdateOption(dhcpv4.OptIPAddressLeaseTime(o.LeaseTime))
	}
}
