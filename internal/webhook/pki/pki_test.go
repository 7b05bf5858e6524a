package pki_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

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
