package cainjector

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func testCA(t *testing.T, name string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func names(b []byte) []string {
	var out []string
	for _, c := range parseBundle(b) {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

func TestDesired(t *testing.T) {
	now := time.Now()
	year := now.Add(365 * 24 * time.Hour)
	a, b, c := testCA(t, "A", year), testCA(t, "B", year), testCA(t, "C", year)
	expired := testCA(t, "old", now.Add(-time.Minute))
	pem := func(cs ...*x509.Certificate) []byte { return encodeBundle(cs) }
	fpB, fpC := fingerprint(parseBundle(pem(b))), fingerprint(parseBundle(pem(c)))
	const overlap = time.Hour

	t.Run("first injection", func(t *testing.T) {
		g := NewWithT(t)
		p, err := desired(pem(a), nil, time.Time{}, "", now, overlap)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(names(p.bundle)).To(Equal([]string{"A"}))
		g.Expect(p.until.IsZero()).To(BeTrue())
	})
	t.Run("unchanged", func(t *testing.T) {
		g := NewWithT(t)
		p, _ := desired(pem(a), pem(a), time.Time{}, "", now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"A"}))
		g.Expect(p.until.IsZero()).To(BeTrue())
	})
	t.Run("a rotation keeps the previous CA for the overlap", func(t *testing.T) {
		g := NewWithT(t)
		p, _ := desired(pem(b), pem(a), time.Time{}, "", now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"B", "A"}), "the new CA first")
		g.Expect(p.until).To(Equal(now.Add(overlap)))
		g.Expect(p.rotation).To(Equal(fpB))

		again, _ := desired(pem(b), p.bundle, p.until, p.rotation, now.Add(overlap/2), overlap)
		g.Expect(names(again.bundle)).To(Equal([]string{"B", "A"}))
		g.Expect(again.until).To(Equal(p.until), "the overlap does not restart on every reconcile")

		after, _ := desired(pem(b), p.bundle, p.until, p.rotation, p.until, overlap)
		g.Expect(names(after.bundle)).To(Equal([]string{"B"}), "dropped once the overlap ends")
		g.Expect(after.until.IsZero()).To(BeTrue())
	})
	t.Run("a second rotation during the overlap starts a new one", func(t *testing.T) {
		g := NewWithT(t)
		until := now.Add(time.Minute)
		p, _ := desired(pem(c), pem(b, a), until, fpB, now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"C", "B", "A"}))
		g.Expect(p.until).To(Equal(now.Add(overlap)))
		g.Expect(p.rotation).To(Equal(fpC))
	})
	t.Run("expired CAs are never kept", func(t *testing.T) {
		g := NewWithT(t)
		p, _ := desired(pem(b), pem(expired, a, a), time.Time{}, "", now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"B", "A"}), "no duplicates either")
	})
	t.Run("no overlap", func(t *testing.T) {
		g := NewWithT(t)
		p, _ := desired(pem(b), pem(a), time.Time{}, "", now, -1)
		g.Expect(names(p.bundle)).To(Equal([]string{"B"}))
	})
	t.Run("no CA", func(t *testing.T) {
		g := NewWithT(t)
		_, err := desired([]byte("not a certificate"), pem(a), time.Time{}, "", now, overlap)
		g.Expect(err).To(MatchError(errNoCA))
	})
}

func TestParseRef(t *testing.T) {
	g := NewWithT(t)
	ns, name, err := parseRef("team/ca")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]string{ns, name}).To(Equal([]string{"team", "ca"}))
	for _, bad := range []string{"", "ca", "/ca", "team/", "a/b/c"} {
		_, _, err := parseRef(bad)
		g.Expect(err).To(HaveOccurred(), bad)
	}
}
