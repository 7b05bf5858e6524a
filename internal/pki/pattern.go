package pki

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The placeholders of a ClusterIssuer policy pattern (spec.policy): each
// stands for one whole DNS label, e-mail local part or URI path segment.
const (
	// AnyPlaceholder matches any one non-empty label, local part or segment.
	AnyPlaceholder = "*"
	// NamespacePlaceholder matches the requesting namespace.
	NamespacePlaceholder = "{namespace}"
)

// uriSchemeRE is an RFC 3986 scheme.
var uriSchemeRE = regexp.MustCompile(`^[a-zA-Z][-a-zA-Z0-9+.]*$`)

// CheckNamePattern says why p is not a DNS name pattern of a ClusterIssuer
// policy (labels "*", "{namespace}" or a DNS label), or nil.
func CheckNamePattern(p string) error {
	if p == "" {
		return errors.New("empty")
	}
	for l := range strings.SplitSeq(strings.TrimSuffix(p, "."), ".") {
		if l == AnyPlaceholder || l == NamespacePlaceholder {
			continue
		}
		if msgs := validation.IsDNS1123Label(strings.ToLower(l)); len(msgs) > 0 {
			return fmt.Errorf("label %q: %s (a label is \"*\", \"{namespace}\" or a DNS label)", l, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// SplitEmail splits an e-mail address (or pattern) at its last "@" into a
// local part and a domain, both not empty.
func SplitEmail(s string) (local, domain string, ok bool) {
	i := strings.LastIndexByte(s, '@')
	if i <= 0 || i == len(s)-1 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// CheckEmailPattern says why p is not an e-mail address pattern of a
// ClusterIssuer policy, or nil: <local part>@<DNS name pattern>, the local
// part "*", "{namespace}" or a literal one without "*", "{", "}" or "@".
func CheckEmailPattern(p string) error {
	local, domain, ok := SplitEmail(p)
	if !ok {
		return errors.New("want <local part>@<domain>, e.g. {namespace}@example.com or *@{namespace}.example.com")
	}
	if local != AnyPlaceholder && local != NamespacePlaceholder && strings.ContainsAny(local, "*{}@ \"") {
		return fmt.Errorf("local part %q: \"*\" and \"{namespace}\" stand only for the whole local part, and a literal one is a dot-atom", local)
	}
	if err := CheckNamePattern(domain); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	return nil
}

// URIPattern is a URI pattern of a ClusterIssuer policy,
// scheme://host[:port][/path], parsed.
type URIPattern struct {
	// Scheme is the scheme, lower case.
	Scheme string
	// Host is a DNS name pattern (CheckNamePattern).
	Host string
	// Port is the port, "" for none.
	Port string
	// Path is the path split at "/" ([""] for no path, ["", ""] for "/"),
	// each segment "*", "{namespace}" or a literal in escaped form.
	Path []string
}

// ParseURIPattern parses a URI pattern of a ClusterIssuer policy:
// scheme://host[:port][/path] with no user info, query or fragment, the
// host a DNS name pattern and "*" and "{namespace}" only as whole path
// segments.
func ParseURIPattern(s string) (URIPattern, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !uriSchemeRE.MatchString(scheme) {
		return URIPattern{}, errors.New("want scheme://host[:port][/path], e.g. spiffe://cluster.local/ns/{namespace}/sa/*")
	}
	if strings.ContainsAny(rest, "?#") {
		return URIPattern{}, errors.New("a query or fragment is never allowed: leave it out")
	}
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if strings.Contains(authority, "@") {
		return URIPattern{}, errors.New("user info is never allowed: leave it out")
	}
	host, port := authority, ""
	if i := strings.LastIndexByte(authority, ':'); i >= 0 {
		host, port = authority[:i], authority[i+1:]
		if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
			return URIPattern{}, fmt.Errorf("port %q is not a number", port)
		}
	}
	if err := CheckNamePattern(host); err != nil {
		return URIPattern{}, fmt.Errorf("host: %w", err)
	}
	segs := strings.Split(path, "/")
	for _, seg := range segs[1:] {
		if seg == AnyPlaceholder || seg == NamespacePlaceholder {
			continue
		}
		if strings.ContainsAny(seg, "*{}") {
			return URIPattern{}, fmt.Errorf("path segment %q: \"*\" and \"{namespace}\" stand only for a whole segment", seg)
		}
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return URIPattern{}, fmt.Errorf("path segment %q: %w", seg, err)
		}
		if dec == "." || dec == ".." {
			return URIPattern{}, fmt.Errorf("path segment %q: dot segments are never allowed", seg)
		}
	}
	return URIPattern{Scheme: strings.ToLower(scheme), Host: host, Port: port, Path: segs}, nil
}
