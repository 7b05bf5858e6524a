package lbdataplane

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"

	"github.com/converge-dev/converge/internal/netns"
)

// Conntrack removes the kernel's connection-tracking entries of UDP flows
// that Converge translated to an endpoint it no longer forwards to.
//
// Why: the nat hooks see only the first packet of a flow; conntrack
// translates every later one. A UDP client that keeps sending from the same
// address and port (DNS resolvers, syslog, game and VoIP traffic) refreshes
// its entry with each packet, so without this it would go on reaching an
// endpoint that failed, was removed or scaled away, for as long as it
// talks. TCP needs no such sweep: a connection to a gone endpoint is reset
// or times out and the client opens a new one, which the rules place.
//
// Only entries that carry Converge's conntrack mark and whose original
// destination is one of the addresses passed in are read or deleted; other
// programs' entries are left alone.
type Conntrack struct {
	// NetNS is the namespace name; "" is the current one.
	NetNS string
}

// FlushStaleUDP deletes the UDP entries whose original destination is
// vip:port of one of vips and whose translated destination is not, for that
// address and port in svcs, an endpoint or a draining endpoint (existing
// flows of a terminating endpoint keep flowing until they end, as TCP
// connections do). An address of vips without a UDP port in svcs keeps no
// entry at all. It returns the number of entries deleted.
func (c Conntrack) FlushStaleUDP(svcs []Service, vips []netip.Addr) (int, error) {
	ours := make(map[netip.Addr]bool, len(vips))
	for _, v := range vips {
		ours[v] = true
	}
	type key struct {
		vip  netip.Addr
		port uint16
	}
	keep := map[key]map[netip.AddrPort]bool{}
	for _, s := range svcs {
		for _, p := range s.Ports {
			if p.Protocol != "udp" {
				continue
			}
			k := key{s.VIP, p.Port}
			if keep[k] == nil {
				keep[k] = map[netip.AddrPort]bool{}
			}
			for _, e := range p.Endpoints {
				keep[k][e] = true
			}
			for _, e := range p.Draining {
				keep[k][e] = true
			}
		}
	}
	var conn *conntrack.Conn
	if err := netns.Do(c.NetNS, func() (err error) { conn, err = conntrack.Dial(nil); return err }); err != nil {
		return 0, fmt.Errorf("opening the conntrack netlink socket: %w", err)
	}
	defer func() { _ = conn.Close() }()
	mark := uint32(masqMarkValue)
	flows, err := conn.DumpFilter(conntrack.NewFilter().Family(netfilter.ProtoIPv4).Mark(mark).MarkMask(mark), nil)
	if err != nil {
		return 0, fmt.Errorf("listing conntrack entries: %w", err)
	}
	deleted := 0
	var errs []error
	// The kernel returns only entries with the mark: those Converge's rules
	// translated, or another program's that set the same bit, which the
	// address check then leaves alone.
	for _, f := range flows {
		if f.TupleOrig.Proto.Protocol != unix.IPPROTO_UDP {
			continue
		}
		vip := f.TupleOrig.IP.DestinationAddress.Unmap()
		if !ours[vip] {
			continue
		}
		// The reply comes from where the flow was translated to.
		to := netip.AddrPortFrom(f.TupleReply.IP.SourceAddress.Unmap(), f.TupleReply.Proto.SourcePort)
		if keep[key{vip, f.TupleOrig.Proto.DestinationPort}][to] {
			continue
		}
		if err := conn.Delete(f); err != nil {
			if errors.Is(err, unix.ENOENT) { // it ended meanwhile
				continue
			}
			errs = append(errs, fmt.Errorf("deleting conntrack entry %s -> %s: %w", f.TupleOrig, to, err))
			continue
		}
		deleted++
	}
	return deleted, errors.Join(errs...)
}
