package localcp

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI file names inside <data-dir>/pki.
const (
	caCertFile      = "ca.crt"
	caKeyFile       = "ca.key"
	servingCertFile = "apiserver.crt"
	servingKeyFile  = "apiserver.key"
	adminCertFile   = "admin.crt"
	adminKeyFile    = "admin.key"
	saKeyFile       = "sa.key"
	saPubFile       = "sa.pub"
	// etcd has a CA of its own, as kubeadm sets it up: a certificate the
	// cluster CA signs (a user's, a node's) must never open etcd.
	etcdCACertFile       = "etcd-ca.crt"
	etcdCAKeyFile        = "etcd-ca.key"
	etcdServerCertFile   = "etcd-server.crt"
	etcdServerKeyFile    = "etcd-server.key"
	etcdClientCertFile   = "apiserver-etcd-client.crt"
	etcdClientKeyFile    = "apiserver-etcd-client.key"
	etcdClientCommonName = "kube-apiserver-etcd-client"
	leafValidity         = 365 * 24 * time.Hour
	caValidity           = 10 * 365 * 24 * time.Hour
	renewBeforeExpiry    = 30 * 24 * time.Hour
	adminUser            = "converge-admin"
)

// pki holds the paths of the control plane's certificates and keys.
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// ensure creates what is missing and renews leaf certificates close to expiry.
// The CAs and the service-account key are created once and never replaced, so
// that kubeconfigs and service-account tokens stay valid across restarts. A
// data directory of an older converge, without the etcd CA and certificates,
// gets them on its next start. Every file is 0600 and the directory 0700,
// also when an older converge made them more open.
func (p pki) ensure() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return fmt.Errorf("creating PKI directory: %w", err)
	}
	if err := os.Chmod(p.dir, 0o700); err != nil {
		return fmt.Errorf("restricting PKI directory: %w", err)
	}
	ca, caKey, err := p.loadOrCreateCA(caCertFile, caKeyFile, "converge-local-ca")
	if err != nil {
		return err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(serviceAPIIP)},
	}
	if err := p.ensureLeaf(servingCertFile, servingKeyFile, serving, ca, caKey); err != nil {
		return err
	}
	admin := &x509.Certificate{
		Subject:     pkix.Name{CommonName: adminUser, Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := p.ensureLeaf(adminCertFile, adminKeyFile, admin, ca, caKey); err != nil {
		return err
	}
	if err := p.ensureEtcd(); err != nil {
		return err
	}
	if err := p.ensureSAKey(); err != nil {
		return err
	}
	return p.restrictFiles()
}

// ensureEtcd issues etcd's serving certificate (also used between peers) and
// the API server's etcd client certificate from the etcd CA.
func (p pki) ensureEtcd() error {
	ca, caKey, err := p.loadOrCreateCA(etcdCACertFile, etcdCAKeyFile, "converge-etcd-ca")
	if err != nil {
		return err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcd"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	if err := p.ensureLeaf(etcdServerCertFile, etcdServerKeyFile, server, ca, caKey); err != nil {
		return err
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: etcdClientCommonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return p.ensureLeaf(etcdClientCertFile, etcdClientKeyFile, client, ca, caKey)
}

// restrictFiles makes every file of the PKI directory 0600: an older converge
// wrote certificates 0644.
func (p pki) restrictFiles() error {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return fmt.Errorf("reading PKI directory: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := os.Chmod(p.path(e.Name()), 0o600); err != nil {
			return fmt.Errorf("restricting %s: %w", e.Name(), err)
		}
	}
	return nil
}

func (p pki) loadOrCreateCA(certFile, keyFile, commonName string) (*x509.Certificate, crypto.Signer, error) {
	cert, key, err := loadPair(p.path(certFile), p.path(keyFile))
	if err == nil {
		return cert, key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, &UserError{Problem: "the local CA in " + p.dir + " cannot be read", Err: err,
			Fix: "remove the data directory (this deletes the local cluster) or pass another --data-dir"}
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
	}
	cert, err = sign(tmpl, key.Public(), nil, key, caValidity)
	if err != nil {
		return nil, nil, err
	}
	if err := writePair(p.path(certFile), p.path(keyFile), cert, key); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func (p pki) ensureLeaf(certFile, keyFile string, tmpl *x509.Certificate, ca *x509.Certificate, caKey crypto.Signer) error {
	if cert, _, err := loadPair(p.path(certFile), p.path(keyFile)); err == nil &&
		time.Until(cert.NotAfter) > renewBeforeExpiry && cert.CheckSignatureFrom(ca) == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key for %s: %w", certFile, err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	cert, err := sign(tmpl, key.Public(), ca, caKey, leafValidity)
	if err != nil {
		return err
	}
	return writePair(p.path(certFile), p.path(keyFile), cert, key)
}

func (p pki) ensureSAKey() error {
	if _, err := os.Stat(p.path(saKeyFile)); err == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating service-account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return fmt.Errorf("encoding service-account public key: %w", err)
	}
	if err := writePrivateFile(p.path(saPubFile), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return err
	}
	return writePrivateFile(p.path(saKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func sign(tmpl *x509.Certificate, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(validity)
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

func loadPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing %s: %w", certPath, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing %s: %w", keyPath, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s is not a signing key", keyPath)
	}
	return cert, signer, nil
}

func writePair(certPath, keyPath string, cert *x509.Certificate, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding key: %w", err)
	}
	if err := writePrivateFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return err
	}
	return writePrivateFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

// writePrivateFile writes a file only its owner may read (0600), through a
// temporary file and a rename, so that a crash or a full disk never leaves a
// half-written file behind. Everything localcp writes is private (see
// restrictDataDir).
func writePrivateFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
