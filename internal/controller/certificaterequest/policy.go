package certificaterequest

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
)

// namespacePlaceholder in a policy pattern stands for the requesting
// namespace.
const namespacePlaceholder = pki.NamespacePlaceholder

// clusterInternalZones are the labels after which, in a cluster-internal
// name, comes what the name belongs to: <x>.<namespace>.svc[.<domain>] and
// <x>.<namespace>.pod[.<domain>].
var clusterInternalZones = map[string]bool{"svc": true, "pod": true}

// checkPolicy says why a ClusterIssuer may not sign csr for a request of
// namespace ns, or "" when it may: the namespace selector, then every DNS
// name, IP address, e-mail address and URI. A ClusterIssuer signs for
// every namespace with one key that every namespace trusts: a tenant's
// leaf for another tenant's Service name, for someone's e-mail address or
// for another site's URI would let it pass for them.
func (r *Reconciler) checkPolicy(ctx context.Context, ci *pkiv1alpha1.ClusterIssuer, ns string, csr *x509.CertificateRequest) (string, error) {
	p := ci.Spec.Policy
	if p != nil && p.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
		if err != nil {
			return fmt.Sprintf("ClusterIssuer %q spec.policy.namespaceSelector is invalid (%v); the cluster admin must fix it", ci.Name, err), nil
		}
		var n corev1.Namespace
		if err := r.Get(ctx, types.NamespacedName{Name: ns}, &n); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Sprintf("namespace %s not found", ns), nil
			}
			return "", fmt.Errorf("reading namespace %s: %w", ns, err)
		}
		if !sel.Matches(labels.Set(n.Labels)) {
			return fmt.Sprintf("ClusterIssuer %q spec.policy.namespaceSelector does not select namespace %s; ask the cluster admin, or use an Issuer of this namespace", ci.Name, ns), nil
		}
	}
	if why := subjectRefused(ci, ns, r.ClusterResourceNamespace, csr.Subject); why != "" {
		return why, nil
	}
	for _, name := range dnsNamesOf(csr) {
		if why := dnsNameRefused(ci, p, ns, r.ClusterResourceNamespace, name); why != "" {
			return why, nil
		}
	}
	for _, ip := range csr.IPAddresses {
		if why := ipAddressRefused(ci, p, ns, r.ClusterResourceNamespace, ip); why != "" {
			return why, nil
		}
	}
	for _, e := range csr.EmailAddresses {
		if why := emailAddressRefused(ci, p, ns, r.ClusterResourceNamespace, e); why != "" {
			return why, nil
		}
	}
	for _, u := range csr.URIs {
		if why := uriRefused(ci, p, ns, r.ClusterResourceNamespace, u); why != "" {
			return why, nil
		}
	}
	return "", nil
}

// subjectRefused: outside the cluster resource namespace a ClusterIssuer
// signs a subject of a common name only. The signed leaf copies the
// request's subject, and its other attributes are identities to many
// clients — Kubernetes reads the organizations of a client certificate as
// groups (O=system:masters is cluster-admin wherever the cluster CA is a
// client CA). A Certificate never asks for them; only a hand-written
// request can.
func subjectRefused(ci *pkiv1alpha1.ClusterIssuer, ns, clusterNS string, subject pkix.Name) string {
	if ns == clusterNS {
		return ""
	}
	for _, a := range subject.Names {
		if a.Type.Equal(oidCommonName) {
			continue
		}
		name, ok := subjectAttributeNames[a.Type.String()]
		if !ok {
			name = "attribute " + a.Type.String()
		}
		return fmt.Sprintf("the request's subject carries %s %q; ClusterIssuer %q signs a subject of a common name only, except for requests of namespace %s (an organization is a group to Kubernetes); ask the cluster admin, or use an Issuer of this namespace",
			name, fmt.Sprint(a.Value), ci.Name, clusterNS)
	}
	return ""
}

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// subjectAttributeNames name the subject attributes Go parses.
var subjectAttributeNames = map[string]string{
	"2.5.4.10": "organization", "2.5.4.11": "organizational unit", "2.5.4.6": "country",
	"2.5.4.8": "province", "2.5.4.7": "locality", "2.5.4.9": "street address",
	"2.5.4.17": "postal code", "2.5.4.5": "serial number", "1.2.840.113549.1.9.1": "e-mail address",
}

// dnsNameRefused applies the policy (or its default) to one name.
func dnsNameRefused(ci *pkiv1alpha1.ClusterIssuer, p *pkiv1alpha1.ClusterIssuerPolicy, ns, clusterNS, name string) string {
	n := normalName(name)
	if p != nil && len(p.AllowedDNSNames) > 0 {
		if matchesAny(p.AllowedDNSNames, ns, n) {
			return ""
		}
		return fmt.Sprintf("DNS name %q matches none of ClusterIssuer %q spec.policy.allowedDNSNames %s (for namespace %s); ask the cluster admin, or use an Issuer of this namespace",
			name, ci.Name, quoteList(p.AllowedDNSNames), ns)
	}
	if ns == clusterNS {
		return ""
	}
	if owner, ok := otherInternalNamespace(n, ns); ok {
		return fmt.Sprintf("DNS name %q is a cluster-internal name of namespace %s, and ClusterIssuer %q signs such names only for requests of that namespace (no spec.policy.allowedDNSNames); ask the cluster admin, or use an Issuer of this namespace",
			name, owner, ci.Name)
	}
	return ""
}

// ipAddressRefused applies the policy (or its default) to one IP address:
// with spec.policy.allowedIPAddresses set, ip must lie in one of them, in
// every namespace; without, no namespace but clusterNS gets an address
// signed. An address names no namespace as a cluster-internal name does: a
// tenant's leaf for 127.0.0.1 or another tenant's Service ClusterIP would
// pass for what listens there to every client trusting the ClusterIssuer.
func ipAddressRefused(ci *pkiv1alpha1.ClusterIssuer, p *pkiv1alpha1.ClusterIssuerPolicy, ns, clusterNS string, ip net.IP) string {
	const hint = "; ask the cluster admin, or use an Issuer of this namespace"
	if p != nil && len(p.AllowedIPAddresses) > 0 {
		if addr, ok := netip.AddrFromSlice(ip); ok && slices.ContainsFunc(p.AllowedIPAddresses, func(cidr string) bool {
			pfx, err := netip.ParsePrefix(cidr)
			return err == nil && pfx.Contains(addr.Unmap())
		}) {
			return ""
		}
		return fmt.Sprintf("IP address %q is in none of ClusterIssuer %q spec.policy.allowedIPAddresses %s (for namespace %s)%s",
			ip.String(), ci.Name, quoteList(p.AllowedIPAddresses), ns, hint)
	}
	if ns == clusterNS {
		return ""
	}
	return fmt.Sprintf("IP address %q: ClusterIssuer %q signs IP addresses only inside spec.policy.allowedIPAddresses, and it sets none (requests of namespace %s may carry no IP address)%s",
		ip.String(), ci.Name, ns, hint)
}

// emailAddressRefused applies the policy (or its default) to one e-mail
// address: with spec.policy.allowedEmailAddresses set, addr must match one
// of them, in every namespace; without, no namespace but clusterNS gets an
// address signed. An address, like an IP address, names no namespace: a
// tenant's leaf for admin@corp.example would sign mail as that person to
// every client trusting the ClusterIssuer.
func emailAddressRefused(ci *pkiv1alpha1.ClusterIssuer, p *pkiv1alpha1.ClusterIssuerPolicy, ns, clusterNS, addr string) string {
	const hint = "; ask the cluster admin, or use an Issuer of this namespace"
	if p != nil && len(p.AllowedEmailAddresses) > 0 {
		if slices.ContainsFunc(p.AllowedEmailAddresses, func(pat string) bool { return matchEmail(pat, ns, addr) }) {
			return ""
		}
		return fmt.Sprintf("e-mail address %q matches none of ClusterIssuer %q spec.policy.allowedEmailAddresses %s (for namespace %s)%s",
			addr, ci.Name, quoteList(p.AllowedEmailAddresses), ns, hint)
	}
	if ns == clusterNS {
		return ""
	}
	return fmt.Sprintf("e-mail address %q: ClusterIssuer %q signs e-mail addresses only matching spec.policy.allowedEmailAddresses, and it sets none (requests of namespace %s may carry no e-mail address)%s",
		addr, ci.Name, ns, hint)
}

// matchEmail matches an e-mail address against a policy pattern
// <local>@<domain>: a local part "*" matches any local part, "{namespace}"
// the namespace, any other only itself (case-sensitively, as RFC 5321
// reads it); the domain is matched as a DNS name (matchPattern).
func matchEmail(pattern, ns, addr string) bool {
	pl, pd, ok := pki.SplitEmail(pattern)
	local, domain, ok2 := pki.SplitEmail(addr)
	if !ok || !ok2 {
		return false
	}
	switch pl {
	case pki.AnyPlaceholder:
	case namespacePlaceholder:
		if local != ns {
			return false
		}
	default:
		if local != pl {
			return false
		}
	}
	return matchesAny([]string{pd}, ns, normalName(domain))
}

// uriRefused applies the policy (or its default) to one URI: with
// spec.policy.allowedURIs set, u must match one of them, in every
// namespace; without, a tenant namespace gets only a Kubernetes SPIFFE ID
// of its own (spiffe://<trust domain>/ns/<namespace>/...) signed, and
// clusterNS any URI. Any other URI names no namespace: a tenant's leaf for
// https://bank.example/ would pass for that site.
func uriRefused(ci *pkiv1alpha1.ClusterIssuer, p *pkiv1alpha1.ClusterIssuerPolicy, ns, clusterNS string, u *url.URL) string {
	const hint = "; ask the cluster admin, or use an Issuer of this namespace"
	if p != nil && len(p.AllowedURIs) > 0 {
		if slices.ContainsFunc(p.AllowedURIs, func(pat string) bool { return matchURI(pat, ns, u) }) {
			return ""
		}
		return fmt.Sprintf("URI %q matches none of ClusterIssuer %q spec.policy.allowedURIs %s (for namespace %s)%s",
			u.String(), ci.Name, quoteList(p.AllowedURIs), ns, hint)
	}
	if ns == clusterNS || ownSPIFFEID(u, ns) {
		return ""
	}
	if owner, ok := spiffeNamespace(u); ok && owner != ns {
		return fmt.Sprintf("URI %q is an identity of namespace %s, and ClusterIssuer %q signs it only for requests of that namespace, not for namespace %s (no spec.policy.allowedURIs)%s",
			u.String(), owner, ci.Name, ns, hint)
	}
	return fmt.Sprintf("URI %q: ClusterIssuer %q signs no URI but a SPIFFE ID of the requesting namespace (spiffe://<trust domain>/ns/%s/...) unless spec.policy.allowedURIs allows it, and it sets none (for namespace %s)%s",
		u.String(), ci.Name, ns, ns, hint)
}

// plainHierarchical reports whether u is scheme://host[:port]/path with no
// user info, query, fragment or dot segment: what a URI pattern matches.
// Dot segments are refused because a verifier may resolve them
// (spiffe://td/ns/a/../b is /ns/b), and "*" must not match them.
func plainHierarchical(u *url.URL) bool {
	if u.Opaque != "" || u.User != nil || u.Host == "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return false
	}
	return !slices.ContainsFunc(strings.Split(u.EscapedPath(), "/"), func(seg string) bool {
		dec, err := url.PathUnescape(seg)
		return err != nil || dec == "." || dec == ".."
	})
}

// ownSPIFFEID reports whether u is a Kubernetes SPIFFE ID of namespace ns:
// spiffe://<any trust domain>/ns/<ns>[/<segment>...], no port, no empty
// segment.
func ownSPIFFEID(u *url.URL, ns string) bool {
	if !strings.EqualFold(u.Scheme, "spiffe") || !plainHierarchical(u) || u.Port() != "" {
		return false
	}
	segs := strings.Split(u.EscapedPath(), "/")
	return len(segs) >= 3 && segs[0] == "" && segs[1] == "ns" && segs[2] == ns && !slices.Contains(segs[1:], "")
}

// matchURI matches a URI against a policy pattern
// (pki.ParseURIPattern): the scheme and port as they are, the host as a
// DNS name (matchPattern), the path segment by segment, "*" any one
// non-empty segment, "{namespace}" the namespace, any other segment itself
// (in escaped form, case-sensitively). A URI with user info, a query, a
// fragment or a dot segment matches no pattern.
func matchURI(pattern, ns string, u *url.URL) bool {
	pp, err := pki.ParseURIPattern(pattern)
	if err != nil || !strings.EqualFold(u.Scheme, pp.Scheme) || u.Port() != pp.Port || !plainHierarchical(u) ||
		!matchesAny([]string{pp.Host}, ns, normalName(u.Hostname())) {
		return false
	}
	segs := strings.Split(u.EscapedPath(), "/")
	if len(segs) != len(pp.Path) {
		return false
	}
	for i, seg := range segs {
		switch pp.Path[i] {
		case pki.AnyPlaceholder:
			if seg == "" {
				return false
			}
		case namespacePlaceholder:
			if seg != ns {
				return false
			}
		default:
			if seg != pp.Path[i] {
				return false
			}
		}
	}
	return true
}

// namespacedACMERefused says why the acme Issuer issuer of namespace ns
// may not order csr's names, or "" when it may: every DNS name (and a
// DNS-like common name) must match one of patterns (the admin's
// --acme-namespaced-dns-names, matched as a ClusterIssuer's
// spec.policy.allowedDNSNames), and IP addresses are never ordered. The
// manager answers every order's HTTP-01 challenge on one shared port, so
// the CA's validation proves only that the name routes to the manager, not
// which namespace it belongs to.
func namespacedACMERefused(patterns []string, issuer, ns string, csr *x509.CertificateRequest) string {
	const hint = "; ask the cluster admin, or use a ClusterIssuer whose spec.policy allows it"
	for _, name := range dnsNamesOf(csr) {
		if !matchesAny(patterns, ns, normalName(name)) {
			if len(patterns) == 0 {
				return fmt.Sprintf("DNS name %q: Issuer %q is a namespaced ACME issuer, and --acme-namespaced-dns-names is empty, so namespaced ACME issuers order no name%s", name, issuer, hint)
			}
			return fmt.Sprintf("DNS name %q matches none of --acme-namespaced-dns-names %s (for namespace %s), the names a namespaced ACME issuer such as Issuer %q may order%s",
				name, quoteList(patterns), ns, issuer, hint)
		}
	}
	if len(csr.IPAddresses) > 0 {
		return fmt.Sprintf("IP address %q: Issuer %q is a namespaced ACME issuer, and those order DNS names only (--acme-namespaced-dns-names)%s", csr.IPAddresses[0].String(), issuer, hint)
	}
	return ""
}

// dnsNamesOf are the DNS names a request asks for: its DNS SANs and a
// common name that looks like one (has a dot).
func dnsNamesOf(csr *x509.CertificateRequest) []string {
	names := csr.DNSNames
	if cn := csr.Subject.CommonName; strings.Contains(cn, ".") {
		names = append(append([]string(nil), names...), cn)
	}
	return names
}

// normalName is name as patterns match it: lower case, no trailing dot.
func normalName(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// matchesAny reports whether the normal name n matches one of patterns for
// namespace ns.
func matchesAny(patterns []string, ns, n string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matchPattern(p, ns, n) })
}

// otherInternalNamespace returns a namespace other than ns that a
// cluster-internal name belongs to: the label before any "svc" or "pod"
// label (after the first label). Every such label is checked, not only the
// first: in web-0.svc.b.svc.cluster.local (Pod web-0 of the headless
// Service "svc" of namespace b) the first says "web-0", the second "b". The
// cluster domain is not needed, so a cluster with another domain than
// cluster.local is covered too; an outside name with such a label
// (a.svc.example.com) is held to the same rule, which
// spec.policy.allowedDNSNames lifts.
func otherInternalNamespace(name, ns string) (string, bool) {
	ls := strings.Split(name, ".")
	for i := 1; i < len(ls); i++ {
		if clusterInternalZones[ls[i]] && ls[i-1] != ns {
			return ls[i-1], true
		}
	}
	return "", false
}

// matchPattern matches a DNS name against a policy pattern label by label:
// "*" matches any one label, "{namespace}" the requesting namespace, any
// other label itself (case-insensitively).
func matchPattern(pattern, ns, name string) bool {
	pl := strings.Split(strings.ToLower(strings.TrimSuffix(pattern, ".")), ".")
	nl := strings.Split(name, ".")
	if len(pl) != len(nl) {
		return false
	}
	for i := range pl {
		switch pl[i] {
		case "*":
			if nl[i] == "" {
				return false
			}
		case namespacePlaceholder:
			if nl[i] != ns {
				return false
			}
		default:
			if pl[i] != nl[i] {
				return false
			}
		}
	}
	return true
}

// spiffeNamespace returns the namespace of a Kubernetes SPIFFE ID
// (spiffe://<trust domain>/ns/<namespace>/sa/<account>).
func spiffeNamespace(u *url.URL) (string, bool) {
	if !strings.EqualFold(u.Scheme, "spiffe") {
		return "", false
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "ns" {
			return parts[i+1], true
		}
	}
	return "", false
}

// quoteList quotes at most 8 items of l, so that a message stays short
// however long the admin's list is.
func quoteList(l []string) string {
	const limit = 8
	q := make([]string, 0, min(len(l), limit)+1)
	for i, s := range l {
		if i == limit {
			q = append(q, fmt.Sprintf("and %d more", len(l)-limit))
			break
		}
		q = append(q, fmt.Sprintf("%q", s))
	}
	return "[" + strings.Join(q, ", ") + "]"
}
