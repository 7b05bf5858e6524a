package certificaterequest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net"
	"net/url"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
)

// The default rule of a ClusterIssuer without allowedDNSNames: a
// cluster-internal name is signed only for its own namespace, whichever of
// its svc/pod labels names another.
func TestDefaultPolicyNames(t *testing.T) {
	ci := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "ca"}}
	for name, refused := range map[string]bool{
		"web.a.svc":                       false,
		"web.a.svc.cluster.local":         false,
		"*.a.svc.cluster.local":           false,
		"web-0.nginx.a.svc.cluster.local": false,
		"svc.a.svc.cluster.local":         false, // a Service named svc
		"10-0-0-7.a.pod.cluster.local":    false,
		"www.example.com":                 false,
		"web.b.svc":                       true,
		"*.b.svc.cluster.local":           true,
		"10-0-0-7.b.pod.cluster.local":    true,
		"web.b.svc.other.domain":          true,
		"a.svc.b.svc.cluster.local":       true, // Pod "a" of b's headless Service "svc"
		"web-0.svc.b.svc.cluster.local":   true,
		"WEB.B.SVC.CLUSTER.LOCAL.":        true,
		"x.a.svc.example.com":             false,
		"x.b.svc.example.com":             true, // lifted only by allowedDNSNames
	} {
		why := dnsNameRefused(ci, nil, "a", "converge-system", name)
		if (why != "") != refused {
			t.Errorf("%s for namespace a: refused %v, want %v (%s)", name, why != "", refused, why)
		}
	}
	// The cluster resource namespace is exempt from the default rule.
	if why := dnsNameRefused(ci, nil, "converge-system", "converge-system", "web.b.svc"); why != "" {
		t.Errorf("cluster resource namespace refused: %s", why)
	}
	// allowedDNSNames, when set, decide alone.
	p := &pkiv1alpha1.ClusterIssuerPolicy{AllowedDNSNames: []string{"*.{namespace}.svc.cluster.local"}}
	if why := dnsNameRefused(ci, p, "a", "converge-system", "web.a.svc.cluster.local"); why != "" {
		t.Errorf("allowed name refused: %s", why)
	}
	if why := dnsNameRefused(ci, p, "a", "converge-system", "web.b.svc.cluster.local"); why == "" {
		t.Errorf("another namespace's name allowed by {namespace}")
	}
}

// A namespaced acme Issuer orders a name only under the admin's patterns
// (--acme-namespaced-dns-names), its common name included, never an IP
// address; no patterns order nothing.
func TestNamespacedACMENames(t *testing.T) {
	patterns := []string{"*.{namespace}.apps.example.com", "{namespace}.example.com"}
	csr := func(cn string, ips []string, names ...string) *x509.CertificateRequest {
		c := &x509.CertificateRequest{DNSNames: names, Subject: pkix.Name{CommonName: cn}}
		for _, ip := range ips {
			c.IPAddresses = append(c.IPAddresses, net.ParseIP(ip))
		}
		return c
	}
	for _, c := range []struct {
		csr     *x509.CertificateRequest
		refused string
	}{
		{csr("", nil, "shop.a.apps.example.com", "a.example.com"), ""},
		{csr("A.EXAMPLE.COM.", nil, "Shop.A.Apps.Example.Com."), ""},
		{csr("", nil, "shop.b.apps.example.com"), `"shop.b.apps.example.com"`},
		{csr("", nil, "shop.a.apps.example.com", "b.example.com"), `"b.example.com"`},
		{csr("b.example.com", nil, "a.example.com"), `"b.example.com"`},
		{csr("", nil, "web.a.svc.cluster.local"), `"web.a.svc.cluster.local"`},
		{csr("", nil, "x.shop.a.apps.example.com"), `"x.shop.a.apps.example.com"`},
		{csr("", []string{"127.0.0.1"}, "a.example.com"), `IP address "127.0.0.1"`},
	} {
		why := namespacedACMERefused(patterns, "le", "a", c.csr)
		if c.refused == "" && why != "" || c.refused != "" && !strings.Contains(why, c.refused) {
			t.Errorf("%v %v cn %q: got %q, want refusal naming %q", c.csr.DNSNames, c.csr.IPAddresses, c.csr.Subject.CommonName, why, c.refused)
		}
	}
	if why := namespacedACMERefused(nil, "le", "a", csr("", nil, "a.example.com")); !strings.Contains(why, "--acme-namespaced-dns-names is empty") {
		t.Errorf("no patterns: got %q", why)
	}
}

// IP addresses: without spec.policy.allowedIPAddresses none is signed for a
// tenant namespace (the cluster resource namespace is exempt); with them,
// an address must lie in one, in every namespace, IPv4-mapped IPv6 read as
// IPv4.
func TestIPAddressPolicy(t *testing.T) {
	ci := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "ca"}}
	for _, c := range []struct {
		p        *pkiv1alpha1.ClusterIssuerPolicy
		ns, ip   string
		refusing string
	}{
		{nil, "a", "10.96.0.10", `IP address "10.96.0.10": ClusterIssuer "ca" signs IP addresses only inside spec.policy.allowedIPAddresses, and it sets none`},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedDNSNames: []string{"*.{namespace}.svc"}}, "a", "127.0.0.1", "sets none"},
		{nil, "converge-system", "10.96.0.10", ""},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"10.96.0.0/12"}}, "a", "10.96.0.10", ""},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"10.96.0.0/12"}}, "a", "::ffff:10.96.0.10", ""},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"10.96.0.0/12"}}, "a", "10.112.0.1", `IP address "10.112.0.1" is in none of ClusterIssuer "ca" spec.policy.allowedIPAddresses ["10.96.0.0/12"] (for namespace a)`},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"10.96.0.0/12"}}, "converge-system", "127.0.0.1", `"127.0.0.1" is in none`},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"2001:db8::/64", "not-a-cidr"}}, "a", "2001:db8::1", ""},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"2001:db8::/64"}}, "a", "10.0.0.1", "is in none"},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"0.0.0.0/0"}}, "a", "::1", "is in none"},
	} {
		why := ipAddressRefused(ci, c.p, c.ns, "converge-system", net.ParseIP(c.ip))
		if c.refusing == "" && why != "" || c.refusing != "" && !strings.Contains(why, c.refusing) {
			t.Errorf("%s for namespace %s: got %q, want refusal naming %q", c.ip, c.ns, why, c.refusing)
		}
	}
}

// E-mail addresses and URIs: without spec.policy.allowedEmailAddresses no
// address is signed for a tenant namespace, and without allowedURIs no URI
// but a Kubernetes SPIFFE ID of the requesting namespace (the cluster
// resource namespace is exempt from both defaults); set, each list decides
// alone, in every namespace, "*" standing for one label, local part or
// path segment and "{namespace}" for the requesting namespace.
func TestEmailAndURIPolicy(t *testing.T) {
	ci := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "ca"}}
	emails := &pkiv1alpha1.ClusterIssuerPolicy{AllowedEmailAddresses: []string{"{namespace}@example.com", "*@{namespace}.mail.example.com", "ops@*.example.org"}}
	uris := &pkiv1alpha1.ClusterIssuerPolicy{AllowedURIs: []string{
		"spiffe://cluster.local/ns/{namespace}/sa/*", "https://{namespace}.apps.example.com/", "https://*.example.net:8443/api/*/v1", "bad pattern"}}
	for _, c := range []struct {
		p             *pkiv1alpha1.ClusterIssuerPolicy
		ns, san       string // a SAN with ":" is a URI
		refusing      string // "" for allowed
		alsoInMessage string
	}{
		// E-mail addresses, no policy.
		{nil, "a", "admin@corp.example", `e-mail address "admin@corp.example": ClusterIssuer "ca" signs e-mail addresses only matching spec.policy.allowedEmailAddresses, and it sets none`, "namespace a"},
		{&pkiv1alpha1.ClusterIssuerPolicy{AllowedDNSNames: []string{"*.{namespace}.svc"}}, "a", "a@example.com", "sets none", ""},
		{nil, "converge-system", "admin@corp.example", "", ""},
		// E-mail addresses, set.
		{emails, "a", "a@example.com", "", ""},
		{emails, "a", "a@EXAMPLE.com.", "", ""},
		{emails, "a", "anyone@a.mail.example.com", "", ""},
		{emails, "a", "ops@x.example.org", "", ""},
		{emails, "a", "b@example.com", `e-mail address "b@example.com" matches none of ClusterIssuer "ca" spec.policy.allowedEmailAddresses ["{namespace}@example.com", "*@{namespace}.mail.example.com", "ops@*.example.org"]`, "(for namespace a)"},
		{emails, "a", "A@example.com", "matches none", ""}, // local parts are case-sensitive
		{emails, "a", "anyone@b.mail.example.com", "matches none", ""},
		{emails, "a", "anyone@x.a.mail.example.com", "matches none", ""},
		{emails, "a", "ops@example.org", "matches none", ""},
		{emails, "a", "Ops@x.example.org", "matches none", ""},
		{emails, "a", "a@example.com@evil.example", "matches none", ""},
		{emails, "a", "@example.com", "matches none", ""},
		{emails, "converge-system", "admin@corp.example", "matches none", ""},
		// URIs, no policy: the own namespace's SPIFFE IDs only.
		{nil, "a", "spiffe://cluster.local/ns/a/sa/default", "", ""},
		{nil, "a", "spiffe://other.domain/ns/a/sa/web", "", ""},
		{nil, "a", "spiffe://cluster.local/ns/b/sa/default", `URI "spiffe://cluster.local/ns/b/sa/default" is an identity of namespace b`, "not for namespace a (no spec.policy.allowedURIs)"},
		{nil, "a", "https://bank.example/", `URI "https://bank.example/": ClusterIssuer "ca" signs no URI but a SPIFFE ID of the requesting namespace (spiffe://<trust domain>/ns/a/...) unless spec.policy.allowedURIs allows it, and it sets none`, "(for namespace a)"},
		{nil, "a", "spiffe://cluster.local/ns/a/sa/x/../../b/sa/y", "sets none", ""},
		{nil, "a", "spiffe://cluster.local/x/ns/a/sa/default", "sets none", ""},
		{nil, "a", "spiffe://cluster.local/ns/a/sa/default?x=1", "sets none", ""},
		{nil, "a", "spiffe://cluster.local:8443/ns/a/sa/default", "sets none", ""},
		{nil, "a", "spiffe://u@cluster.local/ns/a/sa/default", "sets none", ""},
		{nil, "a", "spiffe://cluster.local/ns/a//default", "sets none", ""},
		{nil, "a", "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66", "sets none", ""},
		{nil, "converge-system", "https://bank.example/", "", ""},
		// URIs, set.
		{uris, "a", "spiffe://cluster.local/ns/a/sa/web", "", ""},
		{uris, "a", "SPIFFE://Cluster.Local/ns/a/sa/web", "", ""},
		{uris, "a", "https://a.apps.example.com/", "", ""},
		{uris, "a", "https://x.example.net:8443/api/v2/v1", "", ""},
		{uris, "a", "spiffe://other.domain/ns/a/sa/web", `URI "spiffe://other.domain/ns/a/sa/web" matches none of ClusterIssuer "ca" spec.policy.allowedURIs ["spiffe://cluster.local/ns/{namespace}/sa/*", "https://{namespace}.apps.example.com/", "https://*.example.net:8443/api/*/v1", "bad pattern"]`, "(for namespace a)"},
		{uris, "a", "spiffe://cluster.local/ns/b/sa/web", "matches none", ""},
		{uris, "a", "spiffe://cluster.local/ns/a/sa/web/x", "matches none", ""},
		{uris, "a", "spiffe://cluster.local/ns/a/sa/", "matches none", ""},
		{uris, "a", "spiffe://cluster.local/ns/a/sa/..", "matches none", ""},
		{uris, "a", "spiffe://cluster.local/ns/a/sa/%2e%2e", "matches none", ""},
		{uris, "a", "https://a.apps.example.com", "matches none", ""},
		{uris, "a", "https://b.apps.example.com/", "matches none", ""},
		{uris, "a", "http://a.apps.example.com/", "matches none", ""},
		{uris, "a", "https://a.apps.example.com:444/", "matches none", ""},
		{uris, "a", "https://a.apps.example.com/?next=https://bank.example/", "matches none", ""},
		{uris, "a", "https://a.apps.example.com/#x", "matches none", ""},
		{uris, "a", "https://u@a.apps.example.com/", "matches none", ""},
		{uris, "a", "https://x.example.net/api/v2/v1", "matches none", ""},
		{uris, "a", "https://x.example.net:8443/api/v2/x/v1", "matches none", ""},
		{uris, "a", "https://x.example.net:8443/api//v1", "matches none", ""},
		{uris, "a", "https://bank.example/", "matches none", ""},
		{uris, "converge-system", "https://bank.example/", "matches none", ""},
	} {
		var why string
		if strings.Contains(c.san, ":") {
			u, err := url.Parse(c.san)
			if err != nil {
				t.Fatal(err)
			}
			why = uriRefused(ci, c.p, c.ns, "converge-system", u)
		} else {
			why = emailAddressRefused(ci, c.p, c.ns, "converge-system", c.san)
		}
		if c.refusing == "" && why != "" || c.refusing != "" && (!strings.Contains(why, c.refusing) || !strings.Contains(why, c.alsoInMessage)) {
			t.Errorf("%s for namespace %s: got %q, want refusal naming %q and %q", c.san, c.ns, why, c.refusing, c.alsoInMessage)
		}
	}
}

// The subject: outside the cluster resource namespace a ClusterIssuer
// signs a common name and nothing else of a subject (the leaf copies it;
// an organization is a Kubernetes group).
func TestSubjectPolicy(t *testing.T) {
	ci := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "ca"}}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		subject  pkix.Name
		ns       string
		refusing string
	}{
		{pkix.Name{CommonName: "web.a.svc"}, "a", ""},
		{pkix.Name{}, "a", ""},
		{pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, "a", `the request's subject carries organization "system:masters"; ClusterIssuer "ca" signs a subject of a common name only, except for requests of namespace converge-system`},
		{pkix.Name{CommonName: "web.a.svc", OrganizationalUnit: []string{"ops"}}, "a", `organizational unit "ops"`},
		{pkix.Name{Country: []string{"NL"}}, "a", `country "NL"`},
		{pkix.Name{CommonName: "x", ExtraNames: []pkix.AttributeTypeAndValue{{Type: asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}, Value: "uid"}}}, "a", `attribute 0.9.2342.19200300.100.1.1 "uid"`},
		{pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, "converge-system", ""},
	} {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: c.subject}, key)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := x509.ParseCertificateRequest(der)
		if err != nil {
			t.Fatal(err)
		}
		why := subjectRefused(ci, c.ns, "converge-system", csr.Subject)
		if c.refusing == "" && why != "" || c.refusing != "" && !strings.Contains(why, c.refusing) {
			t.Errorf("%v for namespace %s: got %q, want refusal naming %q", c.subject, c.ns, why, c.refusing)
		}
	}
}
