// Package ippool is the pure address logic of machine IPAM: parsing and
// validating an IPPool's spec, counting its free addresses and choosing an
// address for a MAC. The controller in internal/controller/ippool records
// its choices in the pool's status with an optimistic lock; the DHCP agent
// (internal/dhcp) serves only what is recorded. Nothing here talks to the
// API server. Address ranges reuse internal/lbipam.
package ippool

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/lbipam"
)

// DefaultLeaseTime is the lease time of a pool that sets none, in seconds.
const DefaultLeaseTime = 3600

// Limits the webhook enforces beyond the schema.
const (
	MaxDNS = 3
	MaxNTP = 4
)

// Pool is a parsed IPPool spec.
type Pool struct {
	CIDR    netip.Prefix
	Server  netip.Addr
	Router  netip.Addr // zero when unset
	Range   lbipam.Range
	Exclude map[netip.Addr]bool
	DNS     []netip.Addr
	NTP     []netip.Addr
}

// Parse parses and validates spec; the errors name the fields under p.
func Parse(spec *dhcpv1alpha1.IPPoolSpec, p *field.Path) (*Pool, field.ErrorList) {
	var errs field.ErrorList
	c := &spec.IPv4Config
	cp := p.Child("ipv4Config")
	out := &Pool{Exclude: map[netip.Addr]bool{}}
	addr := func(s string, fp *field.Path) netip.Addr {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || !a.Is4() {
			errs = append(errs, field.Invalid(fp, s, "not an IPv4 address"))
			return netip.Addr{}
		}
		return a
	}
	pfx, err := netip.ParsePrefix(strings.TrimSpace(c.CIDR))
	switch {
	case err != nil || !pfx.Addr().Is4():
		errs = append(errs, field.Invalid(cp.Child("cidr"), c.CIDR, "not an IPv4 CIDR"))
	case pfx.Masked() != pfx:
		errs = append(errs, field.Invalid(cp.Child("cidr"), c.CIDR, fmt.Sprintf("host bits set: did you mean %s?", pfx.Masked())))
	case pfx.Bits() > 30:
		errs = append(errs, field.Invalid(cp.Child("cidr"), c.CIDR, "must be /30 or larger"))
	default:
		out.CIDR = pfx
	}
	inside := func(a netip.Addr, s string, fp *field.Path) {
		if !a.IsValid() || !out.CIDR.IsValid() {
			return
		}
		if !out.CIDR.Contains(a) {
			errs = append(errs, field.Invalid(fp, s, fmt.Sprintf("outside cidr %s", out.CIDR)))
			return
		}
		if a == out.CIDR.Addr() || a == broadcast(out.CIDR) {
			errs = append(errs, field.Invalid(fp, s, fmt.Sprintf("is the network or broadcast address of %s", out.CIDR)))
		}
	}
	rp := cp.Child("pool")
	start, end := addr(c.Pool.Start, rp.Child("start")), addr(c.Pool.End, rp.Child("end"))
	inside(start, c.Pool.Start, rp.Child("start"))
	inside(end, c.Pool.End, rp.Child("end"))
	if start.IsValid() && end.IsValid() {
		if end.Less(start) {
			errs = append(errs, field.Invalid(rp.Child("end"), c.Pool.End, "before pool.start"))
		}
		out.Range = lbipam.Range{First: start, Last: end}
	}
	for i, s := range c.Pool.Exclude {
		a := addr(s, rp.Child("exclude").Index(i))
		if a.IsValid() {
			out.Exclude[a] = true
		}
	}
	out.Server = addr(c.ServerIP, cp.Child("serverIP"))
	inside(out.Server, c.ServerIP, cp.Child("serverIP"))
	inRange := func(a netip.Addr) bool {
		return a.IsValid() && out.Range.First.IsValid() && lbipam.Contains([]lbipam.Range{out.Range}, a)
	}
	if inRange(out.Server) && !out.Exclude[out.Server] {
		errs = append(errs, field.Invalid(cp.Child("serverIP"), c.ServerIP, fmt.Sprintf("inside the pool range %s; exclude it or move it out", out.Range)))
	}
	if c.Router != "" {
		out.Router = addr(c.Router, cp.Child("router"))
		inside(out.Router, c.Router, cp.Child("router"))
		if inRange(out.Router) && !out.Exclude[out.Router] {
			errs = append(errs, field.Invalid(cp.Child("router"), c.Router, fmt.Sprintf("inside the pool range %s; exclude it or move it out", out.Range)))
		}
	}
	if len(c.DNS) > MaxDNS {
		errs = append(errs, field.TooMany(cp.Child("dns"), len(c.DNS), MaxDNS))
	}
	for i, s := range c.DNS {
		if a := addr(s, cp.Child("dns").Index(i)); a.IsValid() {
			out.DNS = append(out.DNS, a)
		}
	}
	if len(c.NTP) > MaxNTP {
		errs = append(errs, field.TooMany(cp.Child("ntp"), len(c.NTP), MaxNTP))
	}
	for i, s := range c.NTP {
		if a := addr(s, cp.Child("ntp").Index(i)); a.IsValid() {
			out.NTP = append(out.NTP, a)
		}
	}
	for i, d := range append([]string{c.DomainName}, c.DomainSearch...) {
		if d == "" {
			continue
		}
		fp := cp.Child("domainName")
		if i > 0 {
			fp = cp.Child("domainSearch").Index(i - 1)
		}
		if err := checkDomain(d); err != nil {
			errs = append(errs, field.Invalid(fp, d, err.Error()))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// checkDomain accepts DNS names of labels 1..63 characters, letters,
// digits and hyphens.
func checkDomain(d string) error {
	d = strings.TrimSuffix(d, ".")
	if len(d) > 253 || d == "" {
		return fmt.Errorf("not a DNS name")
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") {
			return fmt.Errorf("not a DNS name")
		}
		for _, r := range l {
			if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' {
				return fmt.Errorf("not a DNS name")
			}
		}
	}
	return nil
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	var out [4]byte
	binary.BigEndian.PutUint32(out[:], v)
	return netip.AddrFrom4(out)
}

// Overlaps reports whether two parsed pools share an address of their
// CIDRs (two pools on one network must not).
func Overlaps(a, b *Pool) bool {
	return a.CIDR.Overlaps(b.CIDR)
}

// Dynamic reports whether addr may be handed out dynamically.
func (p *Pool) Dynamic(addr netip.Addr) bool {
	return lbipam.Contains([]lbipam.Range{p.Range}, addr) && !p.Exclude[addr] && addr != p.Server && addr != p.Router
}

// StaticOK says why addr may not be given as a static address ("" when it
// may): outside the CIDR, the network or broadcast address, the server or
// the router, or excluded.
func (p *Pool) StaticOK(addr netip.Addr) string {
	switch {
	case !addr.Is4() || !p.CIDR.Contains(addr):
		return fmt.Sprintf("%s is outside cidr %s", addr, p.CIDR)
	case addr == p.CIDR.Addr() || addr == broadcast(p.CIDR):
		return fmt.Sprintf("%s is the network or broadcast address of %s", addr, p.CIDR)
	case addr == p.Server:
		return fmt.Sprintf("%s is the DHCP server's address", addr)
	case p.Router.IsValid() && addr == p.Router:
		return fmt.Sprintf("%s is the router's address", addr)
	case p.Exclude[addr]:
		return fmt.Sprintf("%s is excluded from the pool (spec.ipv4Config.pool.exclude)", addr)
	}
	return ""
}

// Size counts the addresses handed out dynamically.
func (p *Pool) Size() int {
	n := int(lbipam.Size([]lbipam.Range{p.Range}, false))
	for a := range p.Exclude {
		if lbipam.Contains([]lbipam.Range{p.Range}, a) {
			n--
		}
	}
	for _, a := range []netip.Addr{p.Server, p.Router} {
		if a.IsValid() && !p.Exclude[a] && lbipam.Contains([]lbipam.Range{p.Range}, a) {
			n--
		}
	}
	return n
}

// Held indexes allocations by IP.
func Held(as []dhcpv1alpha1.Allocation) map[netip.Addr]dhcpv1alpha1.Allocation {
	m := make(map[netip.Addr]dhcpv1alpha1.Allocation, len(as))
	for _, a := range as {
		if ip, err := netip.ParseAddr(a.IP); err == nil {
			m[ip] = a
		}
	}
	return m
}

// Counts returns the allocated addresses and the free addresses of the
// dynamic range.
func (p *Pool) Counts(as []dhcpv1alpha1.Allocation) (used, available int) {
	free := p.Size()
	for ip := range Held(as) {
		if p.Dynamic(ip) {
			free--
		}
	}
	return len(as), max(free, 0)
}

// Next returns the first dynamic address not held.
func (p *Pool) Next(held map[netip.Addr]dhcpv1alpha1.Allocation) (netip.Addr, bool) {
	return lbipam.First([]lbipam.Range{p.Range}, false, func(a netip.Addr) bool {
		_, taken := held[a]
		return !taken && p.Dynamic(a)
	})
}

// Find returns the allocation of mac, if any.
func Find(as []dhcpv1alpha1.Allocation, mac string) (dhcpv1alpha1.Allocation, bool) {
	i := slices.IndexFunc(as, func(a dhcpv1alpha1.Allocation) bool { return a.MACAddress == mac })
	if i < 0 {
		return dhcpv1alpha1.Allocation{}, false
	}
	return as[i], true
}

// Claim is one namespace's hold on a MAC address on a network: an
// allocation of one of its pools.
type Claim struct {
	Namespace, Pool string
	Allocation      dhcpv1alpha1.Allocation
}

// Before reports whether c was claimed before o: the earlier claimedAt
// (none counts as earliest: allocations made before claimedAt existed),
// then the namespace and the pool name, so every reader agrees.
func (c Claim) Before(o Claim) bool {
	var ct, ot time.Time
	if c.Allocation.ClaimedAt != nil {
		ct = c.Allocation.ClaimedAt.Time
	}
	if o.Allocation.ClaimedAt != nil {
		ot = o.Allocation.ClaimedAt.Time
	}
	if !ct.Equal(ot) {
		return ct.Before(ot)
	}
	if c.Namespace != o.Namespace {
		return c.Namespace < o.Namespace
	}
	return c.Pool < o.Pool
}
