package certificate

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
)

// issueSecret makes the Secret the controller would write for c, signed by
// itself, valid from now for the spec's duration.
func issueSecret(t *testing.T, c *pkiv1alpha1.Certificate, now time.Time) *corev1.Secret {
	t.Helper()
	ks := pki.ResolveKey(c.Spec.PrivateKey)
	key, err := pki.GenerateKey(ks)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := pki.BuildCSR(&c.Spec, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := pki.Template(csr, pki.Duration(&c.Spec), c.Spec.Usages, c.Spec.IsCA, now)
	if err != nil {
		t.Fatal(err)
	}
	crt, err := pki.Sign(tmpl, nil, key)
	if err != nil {
		t.Fatal(err)
	}
	pemKey, _ := pki.EncodeKey(key, ks.Encoding)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: c.Spec.SecretName, Annotations: map[string]string{
			pkiv1alpha1.CertificateNameAnnotation: c.Name, SpecHashAnnotation: pki.SpecHash(&c.Spec)}},
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: pemKey, "ca.crt": crt},
	}
}

func testCert() *pkiv1alpha1.Certificate {
	return &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: pkiv1alpha1.CertificateSpec{
		SecretName: "web-tls", DNSNames: []string{"web.example.com"}, IPAddresses: []string{"127.0.0.1"},
		Duration:   &metav1.Duration{Duration: 3 * time.Hour},
		PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm},
		IssuerRef:  pkiv1alpha1.IssuerReference{Name: "selfsigned"},
	}}
}

// TestEvaluate is the reissue policy: each reason a Secret is reissued for,
// by name, and none for a current Secret.
func TestEvaluate(t *testing.T) {
	now := time.Now()
	other := func() *corev1.Secret { return issueSecret(t, testCert(), now) }
	tests := []struct {
		name   string
		mutate func(c *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret
		at     time.Duration
		want   string
	}{
		{"current", func(_ *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret { return s }, 0, ""},
		{"missing", func(_ *pkiv1alpha1.Certificate, _ *corev1.Secret) *corev1.Secret { return nil }, 0, pkiv1alpha1.DoesNotExistReason},
		{"garbage certificate", func(_ *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret {
			s.Data[corev1.TLSCertKey] = []byte("nope")
			return s
		}, 0, pkiv1alpha1.InvalidKeyPairReason},
		{"another key", func(_ *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret {
			s.Data[corev1.TLSPrivateKeyKey] = other().Data[corev1.TLSPrivateKeyKey]
			return s
		}, 0, pkiv1alpha1.InvalidKeyPairReason},
		{"wrong ca.crt", func(_ *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret {
			s.Data["ca.crt"] = other().Data["ca.crt"]
			return s
		}, 0, pkiv1alpha1.InvalidKeyPairReason},
		{"names changed", func(c *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret {
			c.Spec.DNSNames = append(c.Spec.DNSNames, "api.example.com")
			return s
		}, 0, pkiv1alpha1.SpecChangedReason},
		{"key algorithm changed", func(c *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret {
			c.Spec.PrivateKey.Algorithm = pkiv1alpha1.Ed25519KeyAlgorithm
			return s
		}, 0, pkiv1alpha1.SpecChangedReason},
		{"certificate for other names with a matching hash", func(c *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret {
			c2 := testCert()
			c2.Spec.DNSNames = []string{"evil.example.com"}
			forged := issueSecret(t, c2, now)
			forged.Annotations = s.Annotations
			return forged
		}, 0, pkiv1alpha1.SpecChangedReason},
		{"before 2/3 of the lifetime", func(_ *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret { return s }, 110 * time.Minute, ""},
		{"2/3 of the lifetime passed", func(_ *pkiv1alpha1.Certificate, s *corev1.Secret) *corev1.Secret { return s }, 121 * time.Minute, pkiv1alpha1.RenewingReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := testCert()
			s := tt.mutate(c, issueSecret(t, testCert(), now))
			reason, msg, _ := evaluate(c, s, now.Add(tt.at))
			g.Expect(reason).To(Equal(tt.want), msg)
		})
	}
}

// TestRenewalTime: renewBefore, renewBeforePercentage and the 2/3 default.
func TestRenewalTime(t *testing.T) {
	g := NewWithT(t)
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	na := nb.Add(90 * time.Hour)
	spec := &pkiv1alpha1.CertificateSpec{}
	g.Expect(pki.RenewalTime(spec, nb, na)).To(Equal(nb.Add(60 * time.Hour)))
	spec.RenewBefore = &metav1.Duration{Duration: 10 * time.Hour}
	g.Expect(pki.RenewalTime(spec, nb, na)).To(Equal(na.Add(-10 * time.Hour)))
	spec.RenewBefore = nil
	pct := int32(50)
	spec.RenewBeforePercentage = &pct
	g.Expect(pki.RenewalTime(spec, nb, na)).To(Equal(nb.Add(45 * time.Hour)))
	g.Expect(pki.RenewalClamped(spec, nb, na)).To(BeFalse())
	// The floor: never before a third of the lifetime, whatever the spec.
	pct = 99
	g.Expect(pki.RenewalTime(spec, nb, na)).To(Equal(nb.Add(30 * time.Hour)))
	g.Expect(pki.RenewalClamped(spec, nb, na)).To(BeTrue())
	spec.RenewBeforePercentage = nil
	spec.RenewBefore = &metav1.Duration{Duration: 90*time.Hour - time.Second}
	g.Expect(pki.RenewalTime(spec, nb, na)).To(Equal(nb.Add(30 * time.Hour)))
	g.Expect(pki.RenewalClamped(spec, nb, na)).To(BeTrue())
	spec.RenewBefore = &metav1.Duration{Duration: 60 * time.Hour}
	g.Expect(pki.RenewalTime(spec, nb, na)).To(Equal(nb.Add(30 * time.Hour)))
	g.Expect(pki.RenewalClamped(spec, nb, na)).To(BeFalse())
}

// TestBackoff: 1h, 2h, 4h ... at most 32h (as cert-manager).
func TestBackoff(t *testing.T) {
	g := NewWithT(t)
	var got []time.Duration
	for n := int32(0); n <= 8; n++ {
		got = append(got, backoff(n, DefaultBackoffBase, DefaultBackoffMax))
	}
	h := time.Hour
	g.Expect(got).To(Equal([]time.Duration{0, h, 2 * h, 4 * h, 8 * h, 16 * h, 32 * h, 32 * h, 32 * h}))
}

// TestRequestName: one name per revision and attempt, within 253 bytes.
func TestRequestName(t *testing.T) {
	g := NewWithT(t)
	g.Expect(requestName("web", 1, 0)).To(Equal("web-1"))
	g.Expect(requestName("web", 3, 2)).To(Equal("web-3-2"))
	long := string(make([]byte, 253))
	g.Expect(requestName(long, 10, 10)).To(HaveLen(253))
}
