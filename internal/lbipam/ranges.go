// Package lbipam is the pure address logic of LoadBalancer IPAM: parsing
// pool addresses, overlap checks, sharing rules and choosing an address for
// a Service. The controller in internal/controller/lbipam persists its
// decisions in IPAddressPool status; nothing here talks to the API server.
package lbipam

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// Range is an inclusive IPv4 address range.
type Range struct {
	First, Last netip.Addr
}

// String is the range as "first-last".
func (r Range) String() string { return r.First.String() + "-" + r.Last.String() }

// ParseAddresses parses pool addresses: IPv4 CIDRs or "a-b" ranges. The
// error names the index of the bad entry.
func ParseAddresses(in []string) ([]Range, error) {
	out := make([]Range, 0, len(in))
	for i, s := range in {
		r, err := parseOne(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("addresses[%d] %q: %w", i, s, err)
		}
		out = append(out, r)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[i].overlaps(out[j]) {
				return nil, fmt.Errorf("addresses[%d] %s overlaps addresses[%d] %s", j, in[j], i, in[i])
			}
		}
	}
	return out, nil
}

func parseOne(s string) (Range, error) {
	if a, b, ok := strings.Cut(s, "-"); ok {
		first, err := netip.ParseAddr(strings.TrimSpace(a))
		if err != nil || !first.Is4() {
			return Range{}, fmt.Errorf("range start is not an IPv4 address")
		}
		last, err := netip.ParseAddr(strings.TrimSpace(b))
		if err != nil || !last.Is4() {
			return Range{}, fmt.Errorf("range end is not an IPv4 address")
		}
		if last.Less(first) {
			return Range{}, fmt.Errorf("range end is before its start")
		}
		return Range{first, last}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return Range{}, fmt.Errorf("not an IPv4 CIDR or a range a-b")
	}
	if p.Masked() != p {
		return Range{}, fmt.Errorf("host bits set: did you mean %s?", p.Masked())
	}
	first := p.Addr()
	n := uint32(1) << (32 - p.Bits())
	last := addN(first, n-1)
	return Range{first, last}, nil
}

func (r Range) overlaps(o Range) bool {
	return !r.Last.Less(o.First) && !o.Last.Less(r.First)
}

func (r Range) contains(a netip.Addr) bool {
	return a.Is4() && !a.Less(r.First) && !r.Last.Less(a)
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addN(a netip.Addr, n uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], u32(a)+n)
	return netip.AddrFrom4(b)
}

// Overlap returns the first range of a that overlaps one of b.
func Overlap(a, b []Range) (Range, Range, bool) {
	for _, x := range a {
		for _, y := range b {
			if x.overlaps(y) {
				return x, y, true
			}
		}
	}
	return Range{}, Range{}, false
}

// Contains reports whether addr is in one of the ranges.
func Contains(rs []Range, addr netip.Addr) bool {
	for _, r := range rs {
		if r.contains(addr) {
			return true
		}
	}
	return false
}

// buggy reports whether an address ends in .0 or .255.
func buggy(a netip.Addr) bool {
	b := a.As4()
	return b[3] == 0 || b[3] == 255
}

// Usable reports whether addr may be handed out from the ranges.
func Usable(rs []Range, avoidBuggy bool, addr netip.Addr) bool {
	return Contains(rs, addr) && (!avoidBuggy || !buggy(addr))
}

// Size counts the usable addresses.
func Size(rs []Range, avoidBuggy bool) int64 {
	var n int64
	for _, r := range rs {
		n += int64(u32(r.Last)-u32(r.First)) + 1
		if avoidBuggy {
			for a := r.First; ; a = a.Next() {
				if buggy(a) {
					n--
				}
				if a == r.Last {
					break
				}
			}
		}
	}
	return n
}

// First returns the first usable address for which free is true.
func First(rs []Range, avoidBuggy bool, free func(netip.Addr) bool) (netip.Addr, bool) {
	for _, r := range rs {
		for a := r.First; ; a = a.Next() {
			if (!avoidBuggy || !buggy(a)) && free(a) {
				return a, true
			}
			if a == r.Last {
				break
			}
		}
	}
	return netip.Addr{}, false
}
