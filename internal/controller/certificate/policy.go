package certificate

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/issuerref"
	"github.com/converge-dev/converge/internal/pki"
)

// SpecHashAnnotation on a Secret is pki.SpecHash of the spec it was issued
// for: a different hash means the spec changed.
const SpecHashAnnotation = "pki.converge.dev/spec-hash"

// observed is what the Secret holds, parsed.
type observed struct {
	chain []*x509.Certificate
	key   crypto.Signer
}

// evaluate decides whether the Secret must be (re)issued and why (the
// reasons below, in this order), or returns "" when it is current. It is a
// pure function of the Certificate, the Secret and the time.
func evaluate(c *pkiv1alpha1.Certificate, s *corev1.Secret, now time.Time) (reason, msg string, obs *observed) {
	if s == nil {
		return pkiv1alpha1.DoesNotExistReason, fmt.Sprintf("Secret %q does not exist", c.Spec.SecretName), nil
	}
	chain, err := pki.ParseCerts(s.Data[corev1.TLSCertKey])
	if err != nil {
		return pkiv1alpha1.InvalidKeyPairReason, "tls.crt: " + err.Error(), nil
	}
	key, err := pki.ParseKey(s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return pkiv1alpha1.InvalidKeyPairReason, "tls.key: " + err.Error(), nil
	}
	obs = &observed{chain: chain, key: key}
	if !pki.PublicKeyMatches(chain[0], key) {
		return pkiv1alpha1.InvalidKeyPairReason, "tls.key does not belong to tls.crt", obs
	}
	if ca := s.Data["ca.crt"]; len(ca) > 0 {
		if err := pki.VerifiesWith(chain, ca, now); err != nil {
			return pkiv1alpha1.InvalidKeyPairReason, "tls.crt does not verify with ca.crt: " + err.Error(), obs
		}
	}
	if s.Annotations[SpecHashAnnotation] != pki.SpecHash(&c.Spec) {
		return pkiv1alpha1.SpecChangedReason, "the spec changed since the certificate was issued", obs
	}
	if ok, field := pki.NamesMatch(&c.Spec, chain[0]); !ok {
		return pkiv1alpha1.SpecChangedReason, fmt.Sprintf("the certificate's %s differ from spec.%s", field, field), obs
	}
	if !pki.KeyMatches(key, pki.ResolveKey(c.Spec.PrivateKey)) {
		return pkiv1alpha1.SpecChangedReason, "the private key differs from spec.privateKey", obs
	}
	if rt := pki.RenewalTime(&c.Spec, chain[0].NotBefore, chain[0].NotAfter); !now.Before(rt) {
		return pkiv1alpha1.RenewingReason, fmt.Sprintf("renewal time %s reached", rt.UTC().Format(time.RFC3339)), obs
	}
	return "", "", obs
}

// owned says whether the Secret was written for this Certificate.
func owned(c *pkiv1alpha1.Certificate, s *corev1.Secret) bool {
	return s.Annotations[pkiv1alpha1.CertificateNameAnnotation] == c.Name
}

// backoff is the wait after the n-th consecutive failure.
func backoff(n int32, base, maxWait time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	d := base
	for i := int32(1); i < n && d < maxWait; i++ {
		d *= 2
	}
	return min(d, maxWait)
}

// issuerLabels are the metric labels of the issuer.
func issuerLabels(c *pkiv1alpha1.Certificate) (string, string, string) {
	g := c.Spec.IssuerRef.Group
	if g == "" {
		g = pkiv1alpha1.GroupVersion.Group
	}
	return c.Spec.IssuerRef.Name, issuerref.Kind(c.Spec.IssuerRef), g
}
