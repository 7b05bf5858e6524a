package bmc

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
)

// Lifetimes of the BMC CA and of the Redfish serving certificates it
// issues.
const (
	// CADuration is the CA's lifetime. It is made once and kept in its
	// Secret; it is not rotated (docs/bmc.md).
	CADuration = 10 * 365 * 24 * time.Hour
	// ServingDuration is a Redfish serving certificate's lifetime; a
	// leader issues them at start and again a month before they expire.
	ServingDuration = 365 * 24 * time.Hour
	// renewBefore is how long before its end a serving certificate is
	// issued again.
	renewBefore = 30 * 24 * time.Hour
)

// DefaultCASecretName is the name of the Secret holding the BMC CA, in the
// manager's namespace.
const DefaultCASecretName = "converge-bmc-ca" //nolint:gosec // a Secret's name, not a credential

// CA is the certificate authority of the Redfish serving certificates: one
// for every BMC and every leader, kept in a Secret of the manager's
// namespace (tenants cannot write it), published in each MachineBMC's
// status.redfishCABundle.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// Key signs the serving certificates.
	Key crypto.Signer
	// PEM is Cert, PEM-encoded: the bundle clients trust.
	PEM []byte
}

// NewCA makes a CA: ECDSA P-256, CADuration long.
func NewCA() (*CA, error) {
	key, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	if err != nil {
		return nil, fmt.Errorf("generating the BMC CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "converge-bmc-ca", Organization: []string{"Converge"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CADuration),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		PublicKey:             key.Public(),
	}
	certPEM, err := pki.Sign(tmpl, nil, key)
	if err != nil {
		return nil, fmt.Errorf("signing the BMC CA: %w", err)
	}
	keyPEM, err := pki.EncodeKey(key, pkiv1alpha1.PKCS8)
	if err != nil {
		return nil, err
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := pki.ParseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	key, err := pki.ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	if !certs[0].IsCA || !pki.PublicKeyMatches(certs[0], key) {
		return nil, errors.New("the certificate is not a CA for the key")
	}
	return &CA{Cert: certs[0], Key: key, PEM: pki.EncodeCert(certs[0].Raw)}, nil
}

// LoadOrCreateCA returns the CA kept in the Secret key, creating the Secret
// (type kubernetes.io/tls: tls.crt, tls.key, and ca.crt, the bundle) when
// it does not exist. Creation is create-only: of two managers starting at
// once, the second's create fails with AlreadyExists and it reads the
// first's, so both end with the same CA. A Secret that holds no valid CA is
// an error (it is never overwritten: delete it to have a new CA made).
// created says whether this call made it.
func LoadOrCreateCA(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) (ca *CA, created bool, err error) {
	sec := &corev1.Secret{}
	err = r.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) {
		ca, err = NewCA()
		if err != nil {
			return nil, false, err
		}
		var keyPEM []byte
		keyPEM, err = pki.EncodeKey(ca.Key, pkiv1alpha1.PKCS8)
		if err != nil {
			return nil, false, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{"app.kubernetes.io/name": "converge", "app.kubernetes.io/component": "bmc-ca"}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: ca.PEM, corev1.TLSPrivateKeyKey: keyPEM, CABundleKey: ca.PEM},
		}
		err = w.Create(ctx, sec)
		if err == nil {
			return ca, true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("creating the BMC CA Secret %s: %w", key, err)
		}
		// Another manager made it first: use its CA.
		sec = &corev1.Secret{}
		err = r.Get(ctx, key, sec)
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the BMC CA Secret %s: %w", key, err)
	}
	ca, err = parseCA(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, false, fmt.Errorf("the BMC CA Secret %s holds no valid CA (delete it to have a new one made): %w", key, err)
	}
	return ca, false, nil
}

// CABundleKey is the key of the CA Secret holding the bundle clients trust
// (the CA certificate alone).
const CABundleKey = "ca.crt"

// ReadCAPool reads the CA certificate (only: never the key) from the CA
// Secret key, as a pool for clients of the BMCs: the MachineUpgrade
// controller verifies the Redfish certificates with it.
func ReadCAPool(ctx context.Context, r client.Reader, key types.NamespacedName) (*x509.CertPool, error) {
	sec := &corev1.Secret{}
	if err := r.Get(ctx, key, sec); err != nil {
		return nil, fmt.Errorf("reading the BMC CA Secret %s: %w", key, err)
	}
	certs, err := pki.ParseCerts(sec.Data[corev1.TLSCertKey])
	if err != nil {
		return nil, fmt.Errorf("the BMC CA Secret %s: %w", key, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		if c.IsCA {
			pool.AddCert(c)
		}
	}
	return pool, nil
}

// Pool is a pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a Redfish serving certificate for hosts (IP addresses and
// DNS names), ECDSA P-256, ServingDuration long (never past the CA's end).
func (ca *CA) Issue(hosts []string) (*tls.Certificate, error) {
	key, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "converge-bmc"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(ServingDuration),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		PublicKey:             key.Public(),
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	certPEM, err := pki.Sign(tmpl, ca.Cert, ca.Key)
	if err != nil {
		return nil, err
	}
	certs, err := pki.ParseCerts(certPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{certs[0].Raw}, PrivateKey: key, Leaf: certs[0]}, nil
}

// covers says whether cert names every host and is not due for renewal.
func covers(cert *tls.Certificate, hosts []string, now time.Time) bool {
	if cert == nil || cert.Leaf == nil || now.Add(renewBefore).After(cert.Leaf.NotAfter) {
		return false
	}
	return !slices.ContainsFunc(hosts, func(h string) bool { return h != "" && cert.Leaf.VerifyHostname(h) != nil })
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
