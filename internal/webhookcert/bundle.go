package webhookcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Bundle is a CA and the serving certificate it signed, PEM-encoded.
type Bundle struct {
	// CACert is the CA certificate; it is what clients trust (caBundle).
	CACert []byte
	// CAKey is the CA's private key; empty when the CA is managed elsewhere.
	CAKey []byte
	// Cert is the serving certificate.
	Cert []byte
	// Key is the serving certificate's private key.
	Key []byte
}

const (
	caValidity      = 10 * 365 * 24 * time.Hour
	servingValidity = 365 * 24 * time.Hour
)

// Issue creates a new CA and a serving certificate for hosts (DNS names or
// IP addresses).
func Issue(hosts []string, now time.Time) (*Bundle, error) {
	if len(hosts) == 0 {
		return nil, errors.New("a serving certificate needs at least one host name")
	}
	b, err := NewCA(pkix.Name{CommonName: "converge-webhook-ca"}, now)
	if err != nil {
		return nil, err
	}
	return b, b.reissueServing(hosts, now)
}

// NewCA creates a bundle holding a new CA alone (no serving certificate):
// ECDSA P-256, ten years long, signing leaves only (path length zero).
func NewCA(subject pkix.Name, now time.Time) (*Bundle, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		Subject:               subject,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := sign(caTmpl, &caKey.PublicKey, nil, caKey, now, caValidity)
	if err != nil {
		return nil, err
	}
	b := &Bundle{CACert: pemCert(caDER)}
	if b.CAKey, err = pemKey(caKey); err != nil {
		return nil, err
	}
	return b, nil
}

// IssueServing returns a bundle with b's CA and a new serving certificate
// for hosts, signed by that CA; b is unchanged.
func (b *Bundle) IssueServing(hosts []string, now time.Time) (*Bundle, error) {
	next := &Bundle{CACert: b.CACert, CAKey: b.CAKey}
	if err := next.reissueServing(hosts, now); err != nil {
		return nil, err
	}
	return next, nil
}

// CheckCA reports why the bundle's CA cannot sign, or nil if it can: its
// certificate is a CA and its key is the certificate's (ECDSA).
func (b *Bundle) CheckCA() error {
	_, _, err := b.ca()
	return err
}

// ca parses the CA certificate and its key.
func (b *Bundle) ca() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	ca, err := parseCert(b.CACert)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing CA: %w", err)
	}
	if !ca.IsCA {
		return nil, nil, errors.New("the CA certificate is not a CA")
	}
	caKeyPair, err := tls.X509KeyPair(b.CACert, b.CAKey)
	if err != nil {
		return nil, nil, fmt.Errorf("loading CA key: %w", err)
	}
	caKey, ok := caKeyPair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("CA key is not ECDSA")
	}
	return ca, caKey, nil
}

// reissueServing signs a new serving certificate with the bundle's CA.
func (b *Bundle) reissueServing(hosts []string, now time.Time) error {
	if len(hosts) == 0 {
		return errors.New("a serving certificate needs at least one host name")
	}
	ca, caKey, err := b.ca()
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := sign(tmpl, &key.PublicKey, ca, caKey, now, servingValidity)
	if err != nil {
		return err
	}
	b.Cert = pemCert(der)
	b.Key, err = pemKey(key)
	return err
}

// Check reports why the bundle cannot serve hosts until now+margin, or nil
// if it can.
func (b *Bundle) Check(hosts []string, now time.Time, margin time.Duration) error {
	if b == nil || len(b.Cert) == 0 || len(b.Key) == 0 || len(b.CACert) == 0 {
		return errors.New("no certificate")
	}
	if _, err := tls.X509KeyPair(b.Cert, b.Key); err != nil {
		return fmt.Errorf("serving key pair is invalid: %w", err)
	}
	cert, err := parseCert(b.Cert)
	if err != nil {
		return err
	}
	ca, err := parseCert(b.CACert)
	if err != nil {
		return fmt.Errorf("parsing CA: %w", err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("serving certificate is not signed by the CA: %w", err)
	}
	deadline := now.Add(margin)
	if deadline.After(cert.NotAfter) {
		return fmt.Errorf("serving certificate expires at %s", cert.NotAfter.Format(time.RFC3339))
	}
	if deadline.After(ca.NotAfter) {
		return fmt.Errorf("CA expires at %s", ca.NotAfter.Format(time.RFC3339))
	}
	for _, h := range hosts {
		if err := cert.VerifyHostname(h); err != nil {
			return fmt.Errorf("serving certificate does not cover %q", h)
		}
	}
	return nil
}

// NotAfter is when the serving certificate expires.
func (b *Bundle) NotAfter() time.Time {
	c, err := parseCert(b.Cert)
	if err != nil {
		return time.Time{}
	}
	return c.NotAfter
}

// KeyPair is the serving certificate and its key, for a tls.Config; its
// Leaf is set.
func (b *Bundle) KeyPair() (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return nil, fmt.Errorf("loading serving key pair: %w", err)
	}
	return &pair, nil
}

// CAPool is a pool holding the bundle's CA certificate(s): what a client of
// the certificates it signs trusts.
func (b *Bundle) CAPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b.CACert)
	return p
}

// Equal reports whether two bundles hold the same certificates and keys.
func (b *Bundle) Equal(o *Bundle) bool {
	if b == nil || o == nil {
		return b == o
	}
	return slices.Equal(b.CACert, o.CACert) && slices.Equal(b.CAKey, o.CAKey) &&
		slices.Equal(b.Cert, o.Cert) && slices.Equal(b.Key, o.Key)
}

func sign(tmpl *x509.Certificate, pub any, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, now time.Time, validity time.Duration) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(validity)
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing %q: %w", tmpl.Subject.CommonName, err)
	}
	return der, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseCert(p []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(p)
	if blk == nil {
		return nil, errors.New("certificate is not PEM")
	}
	return x509.ParseCertificate(blk.Bytes)
}
