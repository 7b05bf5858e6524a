// Package pki holds the cryptography of the certificates controllers: key
// generation and encoding, CSRs built from a Certificate's spec, signing
// (self-signed and by a CA), the checks that decide whether a Secret
// still matches its Certificate, and the grammar of a ClusterIssuer
// policy's e-mail address and URI patterns (pattern.go). It does no I/O.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"time"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
)

// DefaultDuration is the lifetime of a certificate that asks for none (90
// days, as cert-manager).
const DefaultDuration = 90 * 24 * time.Hour

// MinimumDuration is the shortest lifetime allowed in production (as
// cert-manager); tests lower it with a manager option.
const MinimumDuration = time.Hour

// KeySpec is a resolved privateKey: algorithm, size and encoding filled.
type KeySpec struct {
	Algorithm, Encoding, RotationPolicy string
	Size                                int
}

// ResolveKey fills the defaults of a Certificate's privateKey.
func ResolveKey(pk *pkiv1alpha1.CertificatePrivateKey) KeySpec {
	k := KeySpec{Algorithm: pkiv1alpha1.RSAKeyAlgorithm, Encoding: pkiv1alpha1.PKCS1, RotationPolicy: pkiv1alpha1.RotationPolicyAlways}
	if pk != nil {
		if pk.Algorithm != "" {
			k.Algorithm = pk.Algorithm
		}
		if pk.Encoding != "" {
			k.Encoding = pk.Encoding
		}
		if pk.RotationPolicy != "" {
			k.RotationPolicy = pk.RotationPolicy
		}
		k.Size = int(pk.Size)
	}
	if k.Size == 0 {
		switch k.Algorithm {
		case pkiv1alpha1.RSAKeyAlgorithm:
			k.Size = 2048
		case pkiv1alpha1.ECDSAKeyAlgorithm:
			k.Size = 256
		}
	}
	return k
}

// ValidateKeySize says whether size fits the algorithm.
func ValidateKeySize(alg string, size int) error {
	switch alg {
	case pkiv1alpha1.RSAKeyAlgorithm, "":
		if size != 0 && (size < 2048 || size > 8192) {
			return errors.New("RSA keys are 2048 to 8192 bits")
		}
	case pkiv1alpha1.ECDSAKeyAlgorithm:
		if size != 0 && size != 256 && size != 384 && size != 521 {
			return errors.New("ECDSA keys are 256, 384 or 521 bits")
		}
	case pkiv1alpha1.Ed25519KeyAlgorithm:
		if size != 0 {
			return errors.New("Ed25519 keys have no size")
		}
	}
	return nil
}

// DefaultMaxRSAKeySize is the largest RSA key Converge generates unless the
// cluster admin allows more (--max-rsa-key-size): an 8192-bit key takes
// seconds of CPU to generate, 4096 a fraction of that.
const DefaultMaxRSAKeySize = 4096

// RSAKeySizeAllowed returns an error when k is an RSA key larger than
// maxSize bits (DefaultMaxRSAKeySize when maxSize is 0).
func RSAKeySizeAllowed(k KeySpec, maxSize int) error {
	if maxSize == 0 {
		maxSize = DefaultMaxRSAKeySize
	}
	if k.Algorithm == pkiv1alpha1.RSAKeyAlgorithm && k.Size > maxSize {
		return fmt.Errorf("RSA keys of more than %d bits are not allowed by the cluster admin (--max-rsa-key-size)", maxSize)
	}
	return nil
}

// GenerateKey makes a private key.
func GenerateKey(k KeySpec) (crypto.Signer, error) {
	switch k.Algorithm {
	case pkiv1alpha1.RSAKeyAlgorithm:
		return rsa.GenerateKey(rand.Reader, k.Size)
	case pkiv1alpha1.ECDSAKeyAlgorithm:
		var c elliptic.Curve
		switch k.Size {
		case 256:
			c = elliptic.P256()
		case 384:
			c = elliptic.P384()
		case 521:
			c = elliptic.P521()
		default:
			return nil, fmt.Errorf("unsupported ECDSA size %d", k.Size)
		}
		return ecdsa.GenerateKey(c, rand.Reader)
	case pkiv1alpha1.Ed25519KeyAlgorithm:
		_, key, err := ed25519.GenerateKey(rand.Reader)
		return key, err
	}
	return nil, fmt.Errorf("unsupported key algorithm %q", k.Algorithm)
}

// KeyMatches says whether key has the algorithm and size of k.
func KeyMatches(key crypto.Signer, k KeySpec) bool {
	switch key := key.(type) {
	case *rsa.PrivateKey:
		return k.Algorithm == pkiv1alpha1.RSAKeyAlgorithm && key.N.BitLen() == k.Size
	case *ecdsa.PrivateKey:
		return k.Algorithm == pkiv1alpha1.ECDSAKeyAlgorithm && key.Curve.Params().BitSize == k.Size
	case ed25519.PrivateKey:
		return k.Algorithm == pkiv1alpha1.Ed25519KeyAlgorithm
	}
	return false
}

// EncodeKey PEM-encodes a key: PKCS1 (RSA PRIVATE KEY / EC PRIVATE KEY) or
// PKCS8 (PRIVATE KEY). Ed25519 is always PKCS8.
func EncodeKey(key crypto.Signer, encoding string) ([]byte, error) {
	if encoding == pkiv1alpha1.PKCS1 {
		switch key := key.(type) {
		case *rsa.PrivateKey:
			return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
		case *ecdsa.PrivateKey:
			der, err := x509.MarshalECPrivateKey(key)
			if err != nil {
				return nil, err
			}
			return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
		}
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey parses a PEM private key in any of the encodings EncodeKey
// writes.
func ParseKey(data []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM private key")
	}
	switch b.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, errors.New("the private key cannot sign")
		}
		return s, nil
	}
	return nil, fmt.Errorf("unknown PEM block %q", b.Type)
}

// ParseCerts parses a PEM bundle, leaf first.
func ParseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// EncodeCert PEM-encodes DER certificates.
func EncodeCert(ders ...[]byte) []byte {
	var buf bytes.Buffer
	for _, d := range ders {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: d})
	}
	return buf.Bytes()
}

// PublicKeyMatches says whether the certificate is for the key.
func PublicKeyMatches(cert *x509.Certificate, key crypto.Signer) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	pub, ok := key.Public().(equaler)
	return ok && pub.Equal(cert.PublicKey)
}

// PublicKeyHash is the hex SHA-256 of a key's PKIX public key.
func PublicKeyHash(key crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return ""
	}
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:])
}

// BuildCSR makes a PEM CSR for the Certificate's subject and names.
func BuildCSR(spec *pkiv1alpha1.CertificateSpec, key crypto.Signer) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: spec.CommonName}, DNSNames: spec.DNSNames, EmailAddresses: spec.EmailAddresses}
	for _, s := range spec.IPAddresses {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("invalid IP address %q", s)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	for _, s := range spec.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("invalid URI %q: %w", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("creating the CSR: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ParseCSR parses and checks the signature of a PEM CSR.
func ParseCSR(data []byte) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("spec.request holds no PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request: bad signature: %w", err)
	}
	return csr, nil
}

var keyUsages = map[pkiv1alpha1.KeyUsage]x509.KeyUsage{
	"signing": x509.KeyUsageDigitalSignature, "digital signature": x509.KeyUsageDigitalSignature,
	"content commitment": x509.KeyUsageContentCommitment, "key encipherment": x509.KeyUsageKeyEncipherment,
	"key agreement": x509.KeyUsageKeyAgreement, "data encipherment": x509.KeyUsageDataEncipherment,
	"cert sign": x509.KeyUsageCertSign, "crl sign": x509.KeyUsageCRLSign,
	"encipher only": x509.KeyUsageEncipherOnly, "decipher only": x509.KeyUsageDecipherOnly,
}

var extKeyUsages = map[pkiv1alpha1.KeyUsage]x509.ExtKeyUsage{
	"any": x509.ExtKeyUsageAny, "server auth": x509.ExtKeyUsageServerAuth, "client auth": x509.ExtKeyUsageClientAuth,
	"code signing": x509.ExtKeyUsageCodeSigning, "email protection": x509.ExtKeyUsageEmailProtection,
	"s/mime": x509.ExtKeyUsageEmailProtection, "ipsec end system": x509.ExtKeyUsageIPSECEndSystem,
	"ipsec tunnel": x509.ExtKeyUsageIPSECTunnel, "ipsec user": x509.ExtKeyUsageIPSECUser,
	"timestamping": x509.ExtKeyUsageTimeStamping, "ocsp signing": x509.ExtKeyUsageOCSPSigning,
	"microsoft sgc": x509.ExtKeyUsageMicrosoftServerGatedCrypto, "netscape sgc": x509.ExtKeyUsageNetscapeServerGatedCrypto,
}

// DefaultUsages are cert-manager's defaults.
var DefaultUsages = []pkiv1alpha1.KeyUsage{"digital signature", "key encipherment"}

// Usages resolves usages (DefaultUsages when empty); a CA also gets cert
// sign.
func Usages(usages []pkiv1alpha1.KeyUsage, isCA bool) (x509.KeyUsage, []x509.ExtKeyUsage, error) {
	if len(usages) == 0 {
		usages = DefaultUsages
	}
	var ku x509.KeyUsage
	var eku []x509.ExtKeyUsage
	for _, u := range usages {
		if k, ok := keyUsages[u]; ok {
			ku |= k
		} else if e, ok := extKeyUsages[u]; ok {
			if !slices.Contains(eku, e) {
				eku = append(eku, e)
			}
		} else {
			return 0, nil, fmt.Errorf("unknown usage %q", u)
		}
	}
	if isCA {
		ku |= x509.KeyUsageCertSign
	}
	return ku, eku, nil
}

// Template is the certificate a request asks for.
func Template(csr *x509.CertificateRequest, duration time.Duration, usages []pkiv1alpha1.KeyUsage, isCA bool, now time.Time) (*x509.Certificate, error) {
	ku, eku, err := Usages(usages, isCA)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber: serial, Subject: csr.Subject,
		DNSNames: csr.DNSNames, IPAddresses: csr.IPAddresses, URIs: csr.URIs, EmailAddresses: csr.EmailAddresses,
		NotBefore: now.Add(-min(time.Minute, duration/100)), NotAfter: now.Add(duration),
		KeyUsage: ku, ExtKeyUsage: eku, BasicConstraintsValid: true, IsCA: isCA,
		PublicKey: csr.PublicKey, PublicKeyAlgorithm: csr.PublicKeyAlgorithm,
	}, nil
}

// Sign signs tmpl with the issuer's certificate and key; a nil issuer
// certificate signs it with its own key (self-signed). It returns the PEM
// certificate.
func Sign(tmpl, issuer *x509.Certificate, issuerKey crypto.Signer) ([]byte, error) {
	if issuer == nil {
		issuer = tmpl
	} else if tmpl.NotAfter.After(issuer.NotAfter) {
		tmpl.NotAfter = issuer.NotAfter // never outlive the CA
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, tmpl.PublicKey, issuerKey)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return EncodeCert(der), nil
}

// SpecHash is a hash of everything in a Certificate's spec that goes into
// the certificate: a change reissues it.
func SpecHash(spec *pkiv1alpha1.CertificateSpec) string {
	k := ResolveKey(spec.PrivateKey)
	usages := spec.Usages
	if len(usages) == 0 {
		usages = DefaultUsages
	}
	b, _ := json.Marshal(struct {
		CN                          string
		DNS, IP, URI, Email         []string
		Duration                    time.Duration
		IsCA                        bool
		Usages                      []pkiv1alpha1.KeyUsage
		Alg, Enc                    string
		Size                        int
		IssuerName, IssuerKind, Grp string
	}{spec.CommonName, spec.DNSNames, spec.IPAddresses, spec.URIs, spec.EmailAddresses, Duration(spec), spec.IsCA, usages,
		k.Algorithm, k.Encoding, k.Size, spec.IssuerRef.Name, spec.IssuerRef.Kind, spec.IssuerRef.Group})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// Duration is the requested lifetime (DefaultDuration when unset).
func Duration(spec *pkiv1alpha1.CertificateSpec) time.Duration {
	if spec.Duration != nil && spec.Duration.Duration > 0 {
		return spec.Duration.Duration
	}
	return DefaultDuration
}

// RenewalTime is when a certificate valid from notBefore to notAfter is
// renewed: renewBefore before notAfter, or renewBeforePercentage of the
// lifetime, or (default) once 2/3 of the lifetime has passed — but never
// before MinLifetimeFraction of the lifetime has passed, whatever the spec
// says (the floor between two issuances of one Certificate; RenewalClamped).
func RenewalTime(spec *pkiv1alpha1.CertificateSpec, notBefore, notAfter time.Time) time.Time {
	life := notAfter.Sub(notBefore)
	return notAfter.Add(-min(requestedRenewBefore(spec, life), MaxRenewBefore(life)))
}

// MaxRenewBefore is the longest renewBefore for a lifetime: a certificate
// lives at least a third of its lifetime before it is renewed, so one
// Certificate is issued at most three times per lifetime (with the 1h
// minimum duration: at most every 20 minutes), however renewBefore or
// renewBeforePercentage are set. cert-manager's own rule (renewBefore
// shorter than the duration) lets a certificate of 1h with renewBefore
// 59m59s be issued every second.
func MaxRenewBefore(life time.Duration) time.Duration {
	return life - life/3
}

// RenewalClamped says whether the spec asks for a renewal earlier than the
// floor for a certificate valid from notBefore to notAfter (RenewalTime
// then renews at the floor).
func RenewalClamped(spec *pkiv1alpha1.CertificateSpec, notBefore, notAfter time.Time) bool {
	life := notAfter.Sub(notBefore)
	return requestedRenewBefore(spec, life) > MaxRenewBefore(life)
}

func requestedRenewBefore(spec *pkiv1alpha1.CertificateSpec, life time.Duration) time.Duration {
	switch {
	case spec.RenewBefore != nil && spec.RenewBefore.Duration > 0 && spec.RenewBefore.Duration < life:
		return spec.RenewBefore.Duration
	case spec.RenewBeforePercentage != nil:
		return life * time.Duration(*spec.RenewBeforePercentage) / 100
	}
	return life / 3
}

// NamesMatch says whether the certificate carries exactly the spec's names
// (order aside); it returns what differs.
func NamesMatch(spec *pkiv1alpha1.CertificateSpec, c *x509.Certificate) (bool, string) {
	eq := func(a, b []string) bool {
		a, b = slices.Clone(a), slices.Clone(b)
		slices.Sort(a)
		slices.Sort(b)
		return slices.Equal(slices.Compact(a), slices.Compact(b))
	}
	var ips, uris []string
	for _, ip := range c.IPAddresses {
		ips = append(ips, ip.String())
	}
	for _, u := range c.URIs {
		uris = append(uris, u.String())
	}
	var want []string
	for _, s := range spec.IPAddresses {
		if ip := net.ParseIP(s); ip != nil {
			want = append(want, ip.String())
		}
	}
	switch {
	case spec.CommonName != "" && c.Subject.CommonName != spec.CommonName:
		return false, "commonName"
	case !eq(c.DNSNames, spec.DNSNames):
		return false, "dnsNames"
	case !eq(ips, want):
		return false, "ipAddresses"
	case !eq(uris, spec.URIs):
		return false, "uris"
	case !eq(c.EmailAddresses, spec.EmailAddresses):
		return false, "emailAddresses"
	case c.IsCA != spec.IsCA:
		return false, "isCA"
	}
	return true, ""
}

// VerifiesWith says whether leaf (with intermediates) chains to a root in
// caPEM.
func VerifiesWith(chain []*x509.Certificate, caPEM []byte, now time.Time) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.New("ca.crt holds no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// LoadCA parses a CA key pair (tls.crt, tls.key and optionally ca.crt) and
// checks that the certificate is a CA for the key. It returns the chain (CA
// first) and the PEM to publish as ca.crt (ca.crt when present, else the last
// certificate of tls.crt).
func LoadCA(crt, key, ca []byte) ([]*x509.Certificate, crypto.Signer, []byte, error) {
	chain, err := ParseCerts(crt)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls.crt: %w", err)
	}
	k, err := ParseKey(key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls.key: %w", err)
	}
	if !PublicKeyMatches(chain[0], k) {
		return nil, nil, nil, errors.New("tls.key does not belong to tls.crt")
	}
	if !chain[0].IsCA {
		return nil, nil, nil, errors.New("tls.crt is not a CA certificate (basic constraints)")
	}
	if len(ca) == 0 {
		ca = EncodeCert(chain[len(chain)-1].Raw)
	}
	return chain, k, ca, nil
}
