package acme_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/acme"
	"github.com/converge-dev/converge/internal/acme/pebbletest"
	"github.com/converge-dev/converge/internal/localcp"
	"github.com/converge-dev/converge/internal/pki"
)

// startPebble runs Pebble and a Solver answering on its HTTP-01 port.
func startPebble(t *testing.T) (*pebbletest.Pebble, *acme.Solver) {
	t.Helper()
	if err := pebbletest.Available(); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("*** SKIPPING: %v ***", err)
		}
		t.Fatal(err)
	}
	port, err := localcp.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := acme.NewSolver()
	srv := &acme.Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Solver: s}
	go func() { _ = srv.Start(t.Context()) }()
	p, err := pebbletest.Start(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p, s
}

func newCSR(t *testing.T, names ...string) []byte {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: names[0]}, DNSNames: names}, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// TestObtainFromPebble registers an account and obtains a certificate from
// a real Pebble, answering HTTP-01 from the Solver; the chain verifies with
// Pebble's root.
func TestObtainFromPebble(t *testing.T) {
	g := NewWithT(t)
	p, s := startPebble(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c, err := acme.NewClient(p.Directory, []string{p.Directory}, p.CABundle, key, "")
	g.Expect(err).NotTo(HaveOccurred())
	uri, err := acme.Register(t.Context(), c, "admin@example.com")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(uri).To(HavePrefix("https://127.0.0.1:"))
	// Registering again finds the same account.
	again, err := acme.Register(t.Context(), c, "admin@example.com")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(uri))

	chain, err := acme.Obtain(t.Context(), c, s, []string{"www.example.test", "example.test"}, nil, newCSR(t, "www.example.test", "example.test"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Served()).To(BeNumerically(">=", 2), "each name's challenge was answered by the solver")
	var certs []*x509.Certificate
	for _, d := range chain {
		cc, err := x509.ParseCertificate(d)
		g.Expect(err).NotTo(HaveOccurred())
		certs = append(certs, cc)
	}
	g.Expect(certs[0].DNSNames).To(ConsistOf("www.example.test", "example.test"))
	root, err := p.Roots(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pki.VerifiesWith(certs, root, certs[0].NotBefore.Add(1))).To(Succeed())
}

// TestObtainUnreachableChallenge: a name resolving where nothing answers
// fails with Pebble's problem document in the error.
func TestObtainUnreachableChallenge(t *testing.T) {
	g := NewWithT(t)
	p, s := startPebble(t)
	g.Expect(p.SetA(t.Context(), "unreachable.test", "127.0.0.2")).To(Succeed())
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c, _ := acme.NewClient(p.Directory, []string{p.Directory}, p.CABundle, key, "")
	_, err := acme.Register(t.Context(), c, "")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = acme.Obtain(t.Context(), c, s, []string{"unreachable.test"}, nil, newCSR(t, "unreachable.test"))
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("unreachable.test"))
	g.Expect(err.Error()).To(Or(ContainSubstring("connection refused"), ContainSubstring("connect")))
}
