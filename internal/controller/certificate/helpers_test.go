package certificate_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/testenv"
)

func selfSignedIssuer(t *testing.T, ns, name string) {
	t.Helper()
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}}
	if err := env.Client.Create(t.Context(), iss); err != nil {
		t.Fatal(err)
	}
}

func newCert(ns, name, issuer string, dns ...string) *pkiv1alpha1.Certificate {
	return &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: pkiv1alpha1.CertificateSpec{
		SecretName: name + "-tls", DNSNames: dns, IssuerRef: pkiv1alpha1.IssuerReference{Name: issuer},
		PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm},
	}}
}

// waitCondition waits until the object's condition has the reason and
// returns the object.
func waitCert(t *testing.T, g Gomega, ns, name, cond string, status metav1.ConditionStatus, reason string) *pkiv1alpha1.Certificate {
	t.Helper()
	c := &pkiv1alpha1.Certificate{}
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, c)).To(Succeed())
		got := meta.FindStatusCondition(c.Status.Conditions, cond)
		g.Expect(got).NotTo(BeNil(), "condition %s", cond)
		g.Expect(got.Status).To(Equal(status), got.Message)
		g.Expect(got.Reason).To(Equal(reason), got.Message)
		testenv.ExpectKstatusAgrees(t.Context(), g, env.Client, c)
	}).Should(Succeed())
	return c
}

func getSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// verifyServing checks the Secret three ways: crypto/x509 against roots,
// `openssl verify` with roots as CAfile, and a real TLS handshake with a
// server serving the Secret's key pair and a client trusting only roots.
func verifyServing(t *testing.T, g Gomega, s *corev1.Secret, roots []byte, serverName string) {
	t.Helper()
	chain, err := pki.ParseCerts(s.Data[corev1.TLSCertKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pki.VerifiesWith(chain, roots, time.Now())).To(Succeed())

	if _, err := exec.LookPath("openssl"); err == nil || os.Getenv("CI") != "" {
		dir := t.TempDir()
		g.Expect(os.WriteFile(filepath.Join(dir, "ca.crt"), roots, 0o600)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(dir, "tls.crt"), s.Data[corev1.TLSCertKey], 0o600)).To(Succeed())
		args := []string{"verify", "-CAfile", filepath.Join(dir, "ca.crt")}
		if len(chain) > 1 {
			g.Expect(os.WriteFile(filepath.Join(dir, "chain.crt"), pki.EncodeCert(chainRaw(chain[1:])...), 0o600)).To(Succeed())
			args = append(args, "-untrusted", filepath.Join(dir, "chain.crt"))
		}
		out, err := exec.CommandContext(t.Context(), "openssl", append(args, filepath.Join(dir, "tls.crt"))...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		g.Expect(string(out)).To(ContainSubstring("OK"))
	} else {
		t.Log("*** openssl not installed: skipping `openssl verify` ***")
	}

	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	g.Expect(err).NotTo(HaveOccurred())
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = ln.Close() }()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = conn.Write([]byte("hello"))
	}()
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(roots)).To(BeTrue())
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12})
	g.Expect(err).NotTo(HaveOccurred(), "TLS handshake with only ca.crt as roots")
	defer func() { _ = conn.Close() }()
	b, err := io.ReadAll(conn)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("hello"))
}

func chainRaw(cs []*x509.Certificate) [][]byte {
	out := make([][]byte, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Raw)
	}
	return out
}

// getSecretErr reads a Secret and returns the error (NotFound when it does
// not exist).
func getSecretErr(t *testing.T, ns, name string) error {
	t.Helper()
	return env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &corev1.Secret{})
}
