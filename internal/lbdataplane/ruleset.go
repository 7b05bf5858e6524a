// Package lbdataplane is the kernel data plane of Converge's LoadBalancer
// Services: nftables rules in Converge's own table (never anyone else's),
// replaced atomically in one transaction, plus the virtual IPs on a dummy
// interface the agent owns and gratuitous ARP on takeover. Everything here
// runs inside a network namespace given by name ("" is the current one) and
// needs root (CAP_NET_ADMIN).
package lbdataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Table is the nftables table (family ip) Converge owns.
const Table = "converge_lb"

// masqMarkValue is the conntrack mark bit Converge's rules set on every
// connection they DNAT. It tells Conntrack which entries are Converge's,
// and asks postrouting to masquerade the connection (so replies return
// through this node) unless localMarkValue is set too.
const masqMarkValue = 0x00004000

// localMarkValue, set with masqMarkValue, marks a connection of an
// externalTrafficPolicy Local Service: DNATed to an endpoint on this node
// and not masqueraded, so the endpoint sees the client's address.
const localMarkValue = 0x00008000

// masqMark, localMark and bothMarks are the marks as nft writes them.
var (
	masqMark  = fmt.Sprintf("0x%08x", masqMarkValue)
	bothMarks = fmt.Sprintf("0x%08x", masqMarkValue|localMarkValue)
)

// MaxComment is the longest rule comment Converge gives nftables, which
// refuses a comment of more than 128 bytes (NFTNL_UDATA_COMMENT_MAXLEN) and
// with it the whole transaction: every tenant's rules.
const MaxComment = 127

// Comment is the rule comment naming a Service's port: name (namespace/name,
// which Kubernetes lets reach 63+1+63 characters) and suffix. It is at most
// MaxComment bytes whatever the name's length: a name that does not fit is
// cut and ends with "~" and 10 hex digits of its SHA-256, so two long names
// sharing a prefix still give different comments. Characters nft cannot
// take in a quoted comment (a double quote, a backslash, control bytes,
// non-ASCII) become "_"; Kubernetes names have none, but the table must
// load anyway.
func Comment(name, suffix string) string {
	safe, suffix := printable(name), printable(suffix)
	if len(suffix) > MaxComment/2 {
		suffix = suffix[:MaxComment/2]
	}
	if c := safe + " " + suffix; len(c) <= MaxComment && safe == name {
		return c
	}
	sum := sha256.Sum256([]byte(name))
	hash := "~" + hex.EncodeToString(sum[:5])
	keep := MaxComment - len(hash) - 1 - len(suffix)
	return safe[:min(keep, len(safe))] + hash + " " + suffix
}

// printable replaces what nft cannot take inside a quoted comment (control
// bytes, quotes, backslashes, non-ASCII) with "_".
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == '"' || r == '\\' || r > 0x7e {
			return '_'
		}
		return r
	}, s)
}

// Service is one virtual IP's listeners.
type Service struct {
	// Name identifies the Service (namespace/name) in rule comments.
	Name string
	VIP  netip.Addr
	// ClientIPAffinity sends each client address to one endpoint (hash of
	// the source address) instead of a random one per connection.
	ClientIPAffinity bool
	// Local is externalTrafficPolicy Local: the endpoints are this node's
	// own and connections are not masqueraded, so an endpoint sees the
	// client's source address. The endpoints must route their replies
	// through this node (they sit behind it, as Pods do).
	Local bool
	Ports []Port
}

// Port is one VIP port and the endpoints it spreads new connections over.
type Port struct {
	// Protocol is "tcp" or "udp".
	Protocol  string
	Port      uint16
	Endpoints []netip.AddrPort
	// Draining are terminating endpoints that still serve: no new
	// connection goes to them (Render ignores them), but their existing
	// flows are kept (Conntrack.FlushStaleUDP).
	Draining []netip.AddrPort
}

// Render returns the complete table as nft input. The output is
// deterministic: the same Services give the same bytes, so a caller can
// skip unchanged applies. Ports without endpoints get no rule: the packet
// reaches the local stack, which refuses it (TCP reset, ICMP unreachable).
//
// Shape, chosen for per-connection cost: one concatenated-key verdict map
// (daddr . proto . dport) looked up once per new connection in the nat
// hooks (later packets of a connection never enter nat chains: conntrack
// applies the translation), then one chain per port doing a single
// numgen (or jhash) map lookup. No per-endpoint rule chains.
func Render(svcs []Service) string {
	svcs = append([]Service(nil), svcs...)
	sort.Slice(svcs, func(i, j int) bool { return svcs[i].VIP.Less(svcs[j].VIP) })
	var b strings.Builder
	var elems []string
	var chains strings.Builder
	n := 0
	for _, s := range svcs {
		ports := append([]Port(nil), s.Ports...)
		sort.Slice(ports, func(i, j int) bool {
			if ports[i].Protocol != ports[j].Protocol {
				return ports[i].Protocol < ports[j].Protocol
			}
			return ports[i].Port < ports[j].Port
		})
		for _, p := range ports {
			if len(p.Endpoints) == 0 {
				continue
			}
			chain := fmt.Sprintf("svc_%d", n)
			n++
			elems = append(elems, fmt.Sprintf("%s . %s . %d : goto %s", s.VIP, p.Protocol, p.Port, chain))
			mark := masqMark
			if s.Local {
				mark = bothMarks
			}
			fmt.Fprintf(&chains, "\tchain %s {\n\t\tct mark set ct mark | %s comment %q\n", chain, mark, Comment(s.Name, p.Protocol+"/"+fmt.Sprint(p.Port)))
			eps := append([]netip.AddrPort(nil), p.Endpoints...)
			sort.Slice(eps, func(i, j int) bool { return eps[i].Compare(eps[j]) < 0 })
			if len(eps) == 1 {
				fmt.Fprintf(&chains, "\t\tmeta l4proto %s dnat ip to %s\n", p.Protocol, eps[0])
			} else {
				sel := fmt.Sprintf("numgen random mod %d", len(eps))
				if s.ClientIPAffinity {
					sel = fmt.Sprintf("jhash ip saddr mod %d", len(eps))
				}
				m := make([]string, len(eps))
				for i, e := range eps {
					m[i] = fmt.Sprintf("%d : %s . %d", i, e.Addr(), e.Port())
				}
				fmt.Fprintf(&chains, "\t\tmeta l4proto %s dnat ip to %s map { %s }\n", p.Protocol, sel, strings.Join(m, ", "))
			}
			chains.WriteString("\t}\n")
		}
	}
	fmt.Fprintf(&b, "table ip %s {\n", Table)
	b.WriteString("\tmap vips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n")
	if len(elems) > 0 {
		fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(elems, ",\n\t\t\t"))
	}
	b.WriteString("\t}\n")
	b.WriteString("\tchain prerouting {\n\t\ttype nat hook prerouting priority -100; policy accept;\n\t\tip daddr . meta l4proto . th dport vmap @vips\n\t}\n")
	b.WriteString("\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n\t\tip daddr . meta l4proto . th dport vmap @vips\n\t}\n")
	fmt.Fprintf(&b, "\tchain postrouting {\n\t\ttype nat hook postrouting priority 100; policy accept;\n\t\tct mark & %s == %s masquerade\n\t}\n", bothMarks, masqMark)
	b.WriteString(chains.String())
	b.WriteString("}\n")
	return b.String()
}
