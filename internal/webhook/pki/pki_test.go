package pki_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	webhookpki "github.com/converge-dev/converge/internal/webhook/pki"
)

// TestValidateCertificate: each refusal names the field.
func TestValidateCertificate(t *testing.T) {
	valid := func() pkiv1alpha1.CertificateSpec {
		return pkiv1alpha1.CertificateSpec{SecretName: "web-tls", DNSNames: []string{"web.example.com", "*.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ca"}}
	}
	tests := []struct {
		name   string
		mutate func(s *pkiv1alpha1.CertificateSpec)
		field  string
	}{
		{"valid", func(*pkiv1alpha1.CertificateSpec) {}, ""},
		{"no name", func(s *pkiv1alpha1.CertificateSpec) { s.DNSNames = nil }, "spec.dnsNames"},
		{"CA without names", func(s *pkiv1alpha1.CertificateSpec) { s.DNSNames, s.IsCA = nil, true }, ""},
		{"bad DNS name", func(s *pkiv1alpha1.CertificateSpec) { s.DNSNames = []string{"not a name"} }, "spec.dnsNames[0]"},
		{"IP in dnsNames", func(s *pkiv1alpha1.CertificateSpec) { s.DNSNames = []string{"10.0.0.1"} }, "spec.dnsNames[0]"},
		{"bad IP", func(s *pkiv1alpha1.CertificateSpec) { s.IPAddresses = []string{"10.0.0"} }, "spec.ipAddresses[0]"},
		{"short duration", func(s *pkiv1alpha1.CertificateSpec) { s.Duration = &metav1.Duration{Duration: time.Minute} }, "spec.duration"},
		{"renewBefore beyond duration", func(s *pkiv1alpha1.CertificateSpec) {
			s.Duration, s.RenewBefore = &metav1.Duration{Duration: 2 * time.Hour}, &metav1.Duration{Duration: 3 * time.Hour}
		}, "spec.renewBefore"},
		{"RSA too small", func(s *pkiv1alpha1.CertificateSpec) {
			s.PrivateKey = &pkiv1alpha1.CertificatePrivateKey{Algorithm: "RSA", Size: 1024}
		}, "spec.privateKey.size"},
		{"RSA 8192 beyond the admin's limit", func(s *pkiv1alpha1.CertificateSpec) {
			s.PrivateKey = &pkiv1alpha1.CertificatePrivateKey{Algorithm: "RSA", Size: 8192}
		}, "spec.privateKey.size"},
		{"RSA 4096", func(s *pkiv1alpha1.CertificateSpec) {
			s.PrivateKey = &pkiv1alpha1.CertificatePrivateKey{Algorithm: "RSA", Size: 4096}
		}, ""},
		{"ECDSA odd size", func(s *pkiv1alpha1.CertificateSpec) {
			s.PrivateKey = &pkiv1alpha1.CertificatePrivateKey{Algorithm: "ECDSA", Size: 2048}
		}, "spec.privateKey.size"},
		{"Ed25519 PKCS1", func(s *pkiv1alpha1.CertificateSpec) {
			s.PrivateKey = &pkiv1alpha1.CertificatePrivateKey{Algorithm: "Ed25519", Encoding: "PKCS1"}
		}, "spec.privateKey.encoding"},
		{"unknown built-in kind", func(s *pkiv1alpha1.CertificateSpec) { s.IssuerRef.Kind = "Vault" }, "spec.issuerRef.kind"},
		{"external group without kind", func(s *pkiv1alpha1.CertificateSpec) { s.IssuerRef.Group = "example.com" }, "spec.issuerRef.kind"},
		{"external group with kind", func(s *pkiv1alpha1.CertificateSpec) { s.IssuerRef.Group, s.IssuerRef.Kind = "example.com", "Vault" }, ""},
		{"bad email", func(s *pkiv1alpha1.CertificateSpec) { s.EmailAddresses = []string{"nope"} }, "spec.emailAddresses[0]"},
		{"bad secret name", func(s *pkiv1alpha1.CertificateSpec) { s.SecretName = "Web_TLS" }, "spec.secretName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := valid()
			tt.mutate(&s)
			errs := webhookpki.Certificate{}.ValidateSpec(&s, field.NewPath("spec"))
			if tt.field == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).NotTo(BeEmpty())
			g.Expect(errs[0].Field).To(Equal(tt.field), errs.ToAggregate().Error())
		})
	}
}

// TestValidateIssuer: exactly one type; ACME server and email checked.
func TestValidateIssuer(t *testing.T) {
	g := NewWithT(t)
	p := field.NewPath("spec")
	g.Expect(webhookpki.ValidateIssuerSpec(&pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}, p)).To(BeEmpty())
	errs := webhookpki.ValidateIssuerSpec(&pkiv1alpha1.IssuerSpec{}, p)
	g.Expect(errs).To(HaveLen(1))
	g.Expect(errs[0].Field).To(Equal("spec"))
	errs = webhookpki.ValidateIssuerSpec(&pkiv1alpha1.IssuerSpec{ACME: &pkiv1alpha1.ACMEIssuer{Server: "ftp://x", Email: "x",
		PrivateKeySecretRef: pkiv1alpha1.SecretKeySelector{Name: "k"}}}, p)
	g.Expect(errs).To(HaveLen(2))
	g.Expect(errs[0].Field).To(Equal("spec.acme.server"))
	g.Expect(errs[1].Field).To(Equal("spec.acme.email"))
}

// TestValidateCertificateSANs: URIs, email addresses, renewBefore and the
// key encoding, each refused or accepted on its own.
func TestValidateCertificateSANs(t *testing.T) {
	valid := func() pkiv1alpha1.CertificateSpec {
		return pkiv1alpha1.CertificateSpec{SecretName: "web-tls", DNSNames: []string{"web.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ca"}}
	}
	tests := []struct {
		name   string
		mutate func(s *pkiv1alpha1.CertificateSpec)
		field  string
	}{
		{"absolute URI", func(s *pkiv1alpha1.CertificateSpec) { s.URIs = []string{"spiffe://example.com/web"} }, ""},
		{"relative URI", func(s *pkiv1alpha1.CertificateSpec) { s.URIs = []string{"web/path"} }, "spec.uris[0]"},
		{"unparseable URI", func(s *pkiv1alpha1.CertificateSpec) { s.URIs = []string{"http://[::1"} }, "spec.uris[0]"},
		{"email address", func(s *pkiv1alpha1.CertificateSpec) { s.EmailAddresses = []string{"ops@example.com"} }, ""},
		{"email with a display name", func(s *pkiv1alpha1.CertificateSpec) { s.EmailAddresses = []string{"Ops <ops@example.com>"} }, "spec.emailAddresses[0]"},
		{"renewBefore within duration", func(s *pkiv1alpha1.CertificateSpec) { s.RenewBefore = &metav1.Duration{Duration: time.Hour} }, ""},
		{"renewBefore zero", func(s *pkiv1alpha1.CertificateSpec) { s.RenewBefore = &metav1.Duration{} }, "spec.renewBefore"},
		{"renewBefore storm", func(s *pkiv1alpha1.CertificateSpec) {
			s.Duration, s.RenewBefore = &metav1.Duration{Duration: time.Hour}, &metav1.Duration{Duration: time.Hour - time.Second}
		}, "spec.renewBefore"},
		{"renewBefore at the floor", func(s *pkiv1alpha1.CertificateSpec) {
			s.Duration, s.RenewBefore = &metav1.Duration{Duration: time.Hour}, &metav1.Duration{Duration: 40 * time.Minute}
		}, ""},
		{"renewBefore past the floor", func(s *pkiv1alpha1.CertificateSpec) {
			s.Duration, s.RenewBefore = &metav1.Duration{Duration: time.Hour}, &metav1.Duration{Duration: 40*time.Minute + time.Second}
		}, "spec.renewBefore"},
		{"renewBeforePercentage 66", func(s *pkiv1alpha1.CertificateSpec) { s.RenewBeforePercentage = ptr.To[int32](66) }, ""},
		{"renewBeforePercentage 99", func(s *pkiv1alpha1.CertificateSpec) { s.RenewBeforePercentage = ptr.To[int32](99) }, "spec.renewBeforePercentage"},
		{"RSA PKCS1", func(s *pkiv1alpha1.CertificateSpec) {
			s.PrivateKey = &pkiv1alpha1.CertificatePrivateKey{Algorithm: "RSA", Size: 2048, Encoding: "PKCS1"}
		}, ""},
		{"Ed25519 PKCS8", func(s *pkiv1alpha1.CertificateSpec) {
			s.PrivateKey = &pkiv1alpha1.CertificatePrivateKey{Algorithm: "Ed25519", Encoding: "PKCS8"}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := valid()
			tt.mutate(&s)
			errs := webhookpki.Certificate{}.ValidateSpec(&s, field.NewPath("spec"))
			if tt.field == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).NotTo(BeEmpty())
			g.Expect(errs[0].Field).To(Equal(tt.field), errs.ToAggregate().Error())
		})
	}
}

// TestDefaultCertificate: built-in references get the group and the kind;
// cert-manager's group maps to the built-in one; external ones are kept.
func TestDefaultCertificate(t *testing.T) {
	tests := []struct {
		name        string
		ref         pkiv1alpha1.IssuerReference
		group, kind string
	}{
		{"empty", pkiv1alpha1.IssuerReference{Name: "ca"}, pkiv1alpha1.GroupVersion.Group, "Issuer"},
		{"cert-manager", pkiv1alpha1.IssuerReference{Name: "ca", Group: webhookpki.CertManagerGroup, Kind: "ClusterIssuer"}, pkiv1alpha1.GroupVersion.Group, "ClusterIssuer"},
		{"external", pkiv1alpha1.IssuerReference{Name: "v", Group: "example.com"}, "example.com", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := &pkiv1alpha1.Certificate{Spec: pkiv1alpha1.CertificateSpec{IssuerRef: tt.ref}}
			g.Expect(webhookpki.Certificate{}.Default(context.Background(), c)).To(Succeed())
			g.Expect(c.Spec.IssuerRef.Group).To(Equal(tt.group))
			g.Expect(c.Spec.IssuerRef.Kind).To(Equal(tt.kind))
		})
	}
}

// TestValidateIssuerACME: a valid ACME issuer passes; the server needs an
// http(s) scheme and a host; every solver needs http01.
func TestValidateIssuerACME(t *testing.T) {
	valid := func() pkiv1alpha1.IssuerSpec {
		return pkiv1alpha1.IssuerSpec{ACME: &pkiv1alpha1.ACMEIssuer{Server: "https://acme.example.com/directory", Email: "ops@example.com",
			PrivateKeySecretRef: pkiv1alpha1.SecretKeySelector{Name: "acme-key"},
			Solvers:             []pkiv1alpha1.ACMESolver{{HTTP01: &pkiv1alpha1.ACMEHTTP01Solver{}}}}}
	}
	tests := []struct {
		name   string
		mutate func(s *pkiv1alpha1.IssuerSpec)
		field  string
	}{
		{"valid", func(*pkiv1alpha1.IssuerSpec) {}, ""},
		{"http server", func(s *pkiv1alpha1.IssuerSpec) { s.ACME.Server = "http://acme.example.com/directory" }, ""},
		{"server without host", func(s *pkiv1alpha1.IssuerSpec) { s.ACME.Server = "https:///directory" }, "spec.acme.server"},
		{"solver without http01", func(s *pkiv1alpha1.IssuerSpec) { s.ACME.Solvers = append(s.ACME.Solvers, pkiv1alpha1.ACMESolver{}) }, "spec.acme.solvers[1].http01"},
		{"CA and ACME", func(s *pkiv1alpha1.IssuerSpec) { s.CA = &pkiv1alpha1.CAIssuer{SecretName: "ca"} }, "spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := valid()
			tt.mutate(&s)
			errs := webhookpki.ValidateIssuerSpec(&s, field.NewPath("spec"))
			if tt.field == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).NotTo(BeEmpty())
			g.Expect(errs[0].Field).To(Equal(tt.field), errs.ToAggregate().Error())
		})
	}
}

// TestValidateCertificateRequest: a signed CSR passes, anything else is
// refused naming spec.request; the spec is immutable.
func TestValidateCertificateRequest(t *testing.T) {
	g := NewWithT(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "web"}}, key)
	g.Expect(err).NotTo(HaveOccurred())
	csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	ctx := context.Background()
	w := webhookpki.CertificateRequest{}
	cr := &pkiv1alpha1.CertificateRequest{Spec: pkiv1alpha1.CertificateRequestSpec{Request: csr, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ca"}}}
	_, err = w.ValidateCreate(ctx, cr)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = w.ValidateUpdate(ctx, cr, cr.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())

	bad := cr.DeepCopy()
	bad.Spec.Request = []byte("not a CSR")
	_, err = w.ValidateCreate(ctx, bad)
	g.Expect(err).To(MatchError(ContainSubstring("spec.request")))
	_, err = w.ValidateUpdate(ctx, cr, bad)
	g.Expect(err).To(MatchError(ContainSubstring("spec: Forbidden")))
}

// TestValidateCertificateObject: the object webhooks return nil for a valid
// Certificate and an Invalid status naming the field otherwise.
func TestValidateCertificateObject(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := &pkiv1alpha1.Certificate{Spec: pkiv1alpha1.CertificateSpec{SecretName: "web-tls", DNSNames: []string{"web.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ca"}}}
	_, err := webhookpki.Certificate{}.ValidateCreate(ctx, c)
	g.Expect(err).NotTo(HaveOccurred())
	bad := c.DeepCopy()
	bad.Spec.SecretName = "Web_TLS"
	_, err = webhookpki.Certificate{}.ValidateUpdate(ctx, c, bad)
	g.Expect(err).To(MatchError(ContainSubstring("spec.secretName")))
}

// TestValidateClusterIssuerPolicy: a namespace selector that does not
// parse is refused at admission naming spec.policy.namespaceSelector; a
// valid policy is accepted.
func TestValidateClusterIssuerPolicy(t *testing.T) {
	g := NewWithT(t)
	w := webhookpki.ClusterIssuer{}
	ci := func(sel *metav1.LabelSelector) *pkiv1alpha1.ClusterIssuer {
		return &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "cluster-ca"},
			Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "ca"}},
				Policy: &pkiv1alpha1.ClusterIssuerPolicy{NamespaceSelector: sel, AllowedDNSNames: []string{"*.{namespace}.svc"}}}}
	}
	_, err := w.ValidateCreate(context.Background(), ci(&metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}))
	g.Expect(err).NotTo(HaveOccurred())
	bad := ci(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}})
	_, err = w.ValidateCreate(context.Background(), bad)
	g.Expect(err).To(MatchError(ContainSubstring("spec.policy.namespaceSelector")))
	_, err = w.ValidateUpdate(context.Background(), ci(nil), bad)
	g.Expect(err).To(MatchError(ContainSubstring("spec.policy.namespaceSelector")))
}

// TestValidateClusterIssuerIPPolicy: every spec.policy.allowedIPAddresses
// entry must be a CIDR, refused naming its index; an ACME ClusterIssuer
// without allowedDNSNames is accepted with a warning naming whom it grants
// any name, a narrowed one or a CA one without.
func TestValidateClusterIssuerIPPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := webhookpki.ClusterIssuer{ACMEAllowedDirectories: []string{"https://acme.example.com/"}}
	ca := func(pol *pkiv1alpha1.ClusterIssuerPolicy) *pkiv1alpha1.ClusterIssuer {
		return &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "cluster-ca"},
			Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "ca"}}, Policy: pol}}
	}
	warns, err := w.ValidateCreate(ctx, ca(&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"10.96.0.0/12", "2001:db8::/64", "192.0.2.7/32"}}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(warns).To(BeEmpty())
	_, err = w.ValidateCreate(ctx, ca(&pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"10.96.0.0/12", "10.0.0.0/33", "192.0.2.7", "web"}}))
	g.Expect(err).To(MatchError(And(ContainSubstring("spec.policy.allowedIPAddresses[1]"), ContainSubstring("spec.policy.allowedIPAddresses[2]"),
		ContainSubstring("spec.policy.allowedIPAddresses[3]"), ContainSubstring("not a CIDR"))))
	g.Expect(err.Error()).NotTo(ContainSubstring("allowedIPAddresses[0]"))

	acme := func(pol *pkiv1alpha1.ClusterIssuerPolicy) *pkiv1alpha1.ClusterIssuer {
		return &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "le"}, Spec: pkiv1alpha1.ClusterIssuerSpec{Policy: pol,
			IssuerSpec: pkiv1alpha1.IssuerSpec{ACME: &pkiv1alpha1.ACMEIssuer{Server: "https://acme.example.com/dir",
				PrivateKeySecretRef: pkiv1alpha1.SecretKeySelector{Name: "le-account"}}}}}
	}
	warns, err = w.ValidateCreate(ctx, acme(nil))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(warns).To(ConsistOf(And(ContainSubstring("ACME ClusterIssuer le without spec.policy.allowedDNSNames"), ContainSubstring("every namespace of the cluster"))))
	warns, err = w.ValidateUpdate(ctx, acme(nil), acme(&pkiv1alpha1.ClusterIssuerPolicy{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(warns).To(ConsistOf(ContainSubstring("every namespace spec.policy.namespaceSelector selects (team=web)")))
	warns, err = w.ValidateCreate(ctx, acme(&pkiv1alpha1.ClusterIssuerPolicy{AllowedDNSNames: []string{"*.{namespace}.apps.example.com"}}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(warns).To(BeEmpty())
}

// TestValidateClusterIssuerEmailURIPolicy: every
// spec.policy.allowedEmailAddresses entry must be <local part>@<domain
// pattern> and every allowedURIs entry scheme://host[:port][/path] with
// "*" and "{namespace}" only as whole labels, local parts or segments;
// each refusal names its index.
func TestValidateClusterIssuerEmailURIPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := webhookpki.ClusterIssuer{}
	ca := func(pol *pkiv1alpha1.ClusterIssuerPolicy) *pkiv1alpha1.ClusterIssuer {
		return &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "cluster-ca"},
			Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "ca"}}, Policy: pol}}
	}
	good := &pkiv1alpha1.ClusterIssuerPolicy{
		AllowedEmailAddresses: []string{"{namespace}@example.com", "*@{namespace}.mail.example.com", "ops.team+alerts@*.example.org"},
		AllowedURIs: []string{"spiffe://cluster.local/ns/{namespace}/sa/*", "https://{namespace}.apps.example.com/", "https://*.example.net:8443/api/*/v1",
			"spiffe://cluster.local", "https://example.com/a%20b/"},
	}
	warns, err := w.ValidateCreate(ctx, ca(good))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(warns).To(BeEmpty())

	bad := &pkiv1alpha1.ClusterIssuerPolicy{
		AllowedEmailAddresses: []string{"ops@example.com", "example.com", "ops-*@example.com", "ops@exa_mple.com", "@example.com", "ops@", "{namespace}x@example.com"},
		AllowedURIs: []string{"https://example.com/", "example.com/path", "https://example.com/?q=1", "https://u@example.com/", "https://example.com:port/",
			"https://example.com/api-*/", "https://example.com/a/../b", "https://ex_ample.com/", "https://example.com/%zz", "https:///path"},
	}
	_, err = w.ValidateCreate(ctx, ca(bad))
	g.Expect(err).To(HaveOccurred())
	for i := 1; i < len(bad.AllowedEmailAddresses); i++ {
		g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("spec.policy.allowedEmailAddresses[%d]", i)))
	}
	for i := 1; i < len(bad.AllowedURIs); i++ {
		g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("spec.policy.allowedURIs[%d]", i)))
	}
	g.Expect(err.Error()).To(And(ContainSubstring("not an e-mail address pattern"), ContainSubstring("not a URI pattern"),
		ContainSubstring("stand only for a whole segment"), ContainSubstring("dot segments"), ContainSubstring("query or fragment")))
	g.Expect(err.Error()).NotTo(ContainSubstring("allowedEmailAddresses[0]"))
	g.Expect(err.Error()).NotTo(ContainSubstring("allowedURIs[0]"))
	_, err = w.ValidateUpdate(ctx, ca(good), ca(&pkiv1alpha1.ClusterIssuerPolicy{AllowedURIs: []string{"https://example.com/", "bank.example"}}))
	g.Expect(err).To(MatchError(ContainSubstring("spec.policy.allowedURIs[1]")))
}
