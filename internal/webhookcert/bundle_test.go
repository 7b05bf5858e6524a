package webhookcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var testHosts = []string{"converge-webhook.converge-system.svc", "127.0.0.1", "localhost"}

func mustIssue(t *testing.T, hosts []string, now time.Time) *Bundle {
	t.Helper()
	b, err := Issue(hosts, now)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return b
}

func mustParse(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	c, err := parseCert(pemBytes)
	if err != nil {
		t.Fatalf("parsing certificate: %v", err)
	}
	return c
}

// bundleWithCAValidity issues a bundle whose CA expires after validity, while
// its serving certificate lasts the usual year.
func bundleWithCAValidity(t *testing.T, hosts []string, now time.Time, validity time.Duration) *Bundle {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "short-lived-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := sign(tmpl, &key.PublicKey, nil, key, now, validity)
	if err != nil {
		t.Fatal(err)
	}
	b := &Bundle{CACert: pemCert(der)}
	if b.CAKey, err = pemKey(key); err != nil {
		t.Fatal(err)
	}
	if err := b.reissueServing(hosts, now); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestIssueProducesUsableBundle(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	b := mustIssue(t, testHosts, now)

	g.Expect(b.CACert).NotTo(BeEmpty())
	g.Expect(b.CAKey).NotTo(BeEmpty())
	g.Expect(b.Check(testHosts, now, 30*24*time.Hour)).To(Succeed())

	ca := mustParse(t, b.CACert)
	g.Expect(ca.IsCA).To(BeTrue())
	leaf := mustParse(t, b.Cert)
	g.Expect(leaf.Subject.CommonName).To(Equal(testHosts[0]))
	g.Expect(leaf.DNSNames).To(ConsistOf("converge-webhook.converge-system.svc", "localhost"))
	g.Expect(leaf.IPAddresses).To(HaveLen(1))
	g.Expect(leaf.IPAddresses[0].String()).To(Equal("127.0.0.1"))
	g.Expect(leaf.ExtKeyUsage).To(ContainElement(x509.ExtKeyUsageServerAuth))
	g.Expect(b.NotAfter()).To(BeTemporally("~", now.Add(servingValidity), time.Second))

	// A client trusting only the CA accepts the leaf for every host.
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, h := range testHosts {
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, CurrentTime: now})
		g.Expect(err).NotTo(HaveOccurred(), "host %s", h)
	}

	// Two issues never share a CA or a key.
	other := mustIssue(t, testHosts, now)
	g.Expect(other.CACert).NotTo(Equal(b.CACert))
	g.Expect(other.Key).NotTo(Equal(b.Key))
	g.Expect(b.Equal(other)).To(BeFalse())
	same := *b
	g.Expect(b.Equal(&same)).To(BeTrue())
}

func TestBundleCheck(t *testing.T) {
	now := time.Now()
	b := mustIssue(t, testHosts, now)
	foreign := mustIssue(t, testHosts, now)
	notAfter := b.NotAfter()
	shortCA := bundleWithCAValidity(t, testHosts, now, 24*time.Hour)

	cases := []struct {
		name    string
		bundle  *Bundle
		hosts   []string
		now     time.Time
		margin  time.Duration
		wantErr string // empty: Check passes
	}{
		{name: "valid for all hosts", bundle: b, hosts: testHosts, now: now, margin: 30 * 24 * time.Hour},
		{name: "valid for a subset of hosts", bundle: b, hosts: []string{"127.0.0.1"}, now: now},
		{name: "another DNS name", bundle: b, hosts: []string{"evil.example.com"}, now: now, wantErr: `does not cover "evil.example.com"`},
		{name: "another IP", bundle: b, hosts: []string{"10.0.0.1"}, now: now, wantErr: `does not cover "10.0.0.1"`},
		{name: "one uncovered host among covered", bundle: b, hosts: []string{"127.0.0.1", "other.svc"}, now: now, wantErr: `does not cover "other.svc"`},
		{name: "margin reaches beyond NotAfter", bundle: b, hosts: testHosts, now: notAfter.Add(-10 * 24 * time.Hour), margin: 30 * 24 * time.Hour, wantErr: "serving certificate expires at"},
		{name: "just inside the margin", bundle: b, hosts: testHosts, now: notAfter.Add(-31 * 24 * time.Hour), margin: 30 * 24 * time.Hour},
		{name: "expired", bundle: b, hosts: testHosts, now: notAfter.Add(time.Hour), wantErr: "serving certificate expires at"},
		{name: "CA expires within the margin", bundle: shortCA, hosts: testHosts, now: now, margin: 2 * 24 * time.Hour, wantErr: "CA expires at"},
		{name: "short CA still fine without margin", bundle: shortCA, hosts: testHosts, now: now},
		{name: "not signed by the CA", bundle: &Bundle{CACert: foreign.CACert, CAKey: foreign.CAKey, Cert: b.Cert, Key: b.Key}, hosts: testHosts, now: now, wantErr: "not signed by the CA"},
		{name: "key does not match certificate", bundle: &Bundle{CACert: b.CACert, Cert: b.Cert, Key: foreign.Key}, hosts: testHosts, now: now, wantErr: "key pair is invalid"},
		{name: "garbage CA", bundle: &Bundle{CACert: []byte("not pem"), Cert: b.Cert, Key: b.Key}, hosts: testHosts, now: now, wantErr: "parsing CA"},
		{name: "nil bundle", bundle: nil, hosts: testHosts, now: now, wantErr: "no certificate"},
		{name: "empty bundle", bundle: &Bundle{}, hosts: testHosts, now: now, wantErr: "no certificate"},
		{name: "no CA", bundle: &Bundle{Cert: b.Cert, Key: b.Key}, hosts: testHosts, now: now, wantErr: "no certificate"},
		{name: "no key", bundle: &Bundle{CACert: b.CACert, Cert: b.Cert}, hosts: testHosts, now: now, wantErr: "no certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tc.bundle.Check(tc.hosts, tc.now, tc.margin)
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
		})
	}
}

func TestReissueServingKeepsCA(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	b := mustIssue(t, testHosts, now)
	next := &Bundle{CACert: b.CACert, CAKey: b.CAKey}
	g.Expect(next.reissueServing(testHosts, now.Add(time.Hour))).To(Succeed())
	g.Expect(next.CACert).To(Equal(b.CACert))
	g.Expect(next.Cert).NotTo(Equal(b.Cert))
	g.Expect(next.Key).NotTo(Equal(b.Key))
	g.Expect(next.Check(testHosts, now.Add(time.Hour), 0)).To(Succeed())
	g.Expect(mustParse(t, next.Cert).SerialNumber).NotTo(Equal(mustParse(t, b.Cert).SerialNumber))

	// Without the CA key there is nothing to sign with.
	noKey := &Bundle{CACert: b.CACert}
	g.Expect(noKey.reissueServing(testHosts, now)).NotTo(Succeed())
}

func TestBundleNotAfterAndEqualEdgeCases(t *testing.T) {
	g := NewWithT(t)
	g.Expect((&Bundle{}).NotAfter().IsZero()).To(BeTrue())
	var nilBundle *Bundle
	g.Expect(nilBundle.Equal(nil)).To(BeTrue())
	g.Expect(nilBundle.Equal(&Bundle{})).To(BeFalse())
	g.Expect((&Bundle{}).Equal(nil)).To(BeFalse())
}
