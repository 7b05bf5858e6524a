package cainjector

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func testCA(t *testing.T, name string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	c, _ := testCAKey(t, name, notAfter)
	return c
}

func testCAKey(t *testing.T, name string, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
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
	return c, key
}

// testLeaf signs a serving certificate with the CA.
func testLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
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
	none := func() ([]*x509.Certificate, error) { return nil, nil }

	t.Run("first injection", func(t *testing.T) {
		g := NewWithT(t)
		p, err := desired(pem(a), nil, overlapState{}, none, now, overlap)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(names(p.bundle)).To(Equal([]string{"A"}))
		g.Expect(p.until.IsZero()).To(BeTrue())
	})
	t.Run("unchanged", func(t *testing.T) {
		g := NewWithT(t)
		p, _ := desired(pem(a), pem(a), overlapState{}, none, now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"A"}))
		g.Expect(p.until.IsZero()).To(BeTrue())
	})
	t.Run("a rotation keeps the previous CA for the overlap", func(t *testing.T) {
		g := NewWithT(t)
		p, _ := desired(pem(b), pem(a), overlapState{}, none, now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"B", "A"}), "the new CA first")
		g.Expect(p.until).To(Equal(now.Add(overlap)))
		g.Expect(p.rotation).To(Equal(fpB))

		again, _ := desired(pem(b), p.bundle, overlapState{until: p.until, rotation: p.rotation}, none, now.Add(overlap/2), overlap)
		g.Expect(names(again.bundle)).To(Equal([]string{"B", "A"}))
		g.Expect(again.until).To(Equal(p.until), "the overlap does not restart on every reconcile")

		after, _ := desired(pem(b), p.bundle, overlapState{until: p.until, rotation: p.rotation}, none, p.until, overlap)
		g.Expect(names(after.bundle)).To(Equal([]string{"B"}), "dropped once the overlap ends")
		g.Expect(after.until.IsZero()).To(BeTrue())
	})
	t.Run("a second rotation during the overlap starts a new one", func(t *testing.T) {
		g := NewWithT(t)
		until := now.Add(time.Minute)
		p, _ := desired(pem(c), pem(b, a), overlapState{until: until, rotation: fpB}, none, now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"C", "B", "A"}))
		g.Expect(p.until).To(Equal(now.Add(overlap)))
		g.Expect(p.rotation).To(Equal(fpC))
	})
	t.Run("expired CAs are never kept", func(t *testing.T) {
		g := NewWithT(t)
		p, _ := desired(pem(b), pem(expired, a, a), overlapState{}, none, now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"B", "A"}), "no duplicates either")
	})
	t.Run("an old CA stays while a certificate it signed is issued, then for an overlap", func(t *testing.T) {
		g := NewWithT(t)
		oldCA, oldKey := testCAKey(t, "old", year)
		newCA, newKey := testCAKey(t, "new", year)
		oldLeaf, newLeaf := testLeaf(t, oldCA, oldKey, year), testLeaf(t, newCA, newKey, year)
		expiredLeaf := testLeaf(t, oldCA, oldKey, now.Add(-time.Minute))
		issued := []*x509.Certificate{oldLeaf, expiredLeaf, newCA}
		leaves := func() ([]*x509.Certificate, error) { return issued, nil }

		p, _ := desired(pem(newCA), pem(oldCA), overlapState{}, leaves, now, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"new", "old"}))
		g.Expect(p.until).To(Equal(now.Add(overlap)))
		g.Expect(p.leaves).To(Equal(fingerprint([]*x509.Certificate{oldLeaf})), "the unexpired leaf of the old CA, not the new CA")
		st := overlapState{until: p.until, rotation: p.rotation, leaves: p.leaves}

		// The overlap ends while the old leaf is still issued: held.
		end := p.until
		held, _ := desired(pem(newCA), p.bundle, st, leaves, end, overlap)
		g.Expect(names(held.bundle)).To(Equal([]string{"new", "old"}), "not dropped while its leaf is issued")
		g.Expect(held.until).To(Equal(end.Add(overlap)))
		st.until = held.until

		// The leaf is reissued from the new CA just before the overlap would
		// end: the overlap runs its length again from then.
		issued = []*x509.Certificate{newLeaf, expiredLeaf, newCA}
		swap := held.until.Add(-time.Second)
		p, _ = desired(pem(newCA), held.bundle, st, leaves, swap, overlap)
		g.Expect(names(p.bundle)).To(Equal([]string{"new", "old"}), "the server still reloads")
		g.Expect(p.until).To(Equal(swap.Add(overlap)))
		g.Expect(p.leaves).To(BeEmpty())
		st = overlapState{until: p.until, rotation: p.rotation, leaves: p.leaves}

		again, _ := desired(pem(newCA), p.bundle, st, leaves, swap.Add(overlap/2), overlap)
		g.Expect(again.until).To(Equal(p.until), "no change, no new overlap")
		after, _ := desired(pem(newCA), p.bundle, st, leaves, p.until, overlap)
		g.Expect(names(after.bundle)).To(Equal([]string{"new"}), "dropped once nothing it signed is issued and the overlap passed")
		g.Expect(after.until.IsZero()).To(BeTrue())
	})
	t.Run("listing the issued certificates fails", func(t *testing.T) {
		g := NewWithT(t)
		boom := errors.New("boom")
		_, err := desired(pem(b), pem(a), overlapState{}, func() ([]*x509.Certificate, error) { return nil, boom }, now, overlap)
		g.Expect(err).To(MatchError(boom))
	})
	t.Run("no overlap", func(t *testing.T) {
		g := NewWithT(t)
		p, _ := desired(pem(b), pem(a), overlapState{}, none, now, -1)
		g.Expect(names(p.bundle)).To(Equal([]string{"B"}))
	})
	t.Run("no CA", func(t *testing.T) {
		g := NewWithT(t)
		_, err := desired([]byte("not a certificate"), pem(a), overlapState{}, none, now, overlap)
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

// TestReadError: a read of the issuer or its CA Secret that found nothing
// is an issuerCAGoneError (an Event, and the ca.crt alone is injected);
// any other failure is returned for a retry.
func TestReadError(t *testing.T) {
	g := NewWithT(t)
	var gone *issuerCAGoneError
	notFound := readError(apierrors.NewNotFound(schema.GroupResource{Group: "pki.converge.dev", Resource: "issuers"}, "ca"), "Issuer ca")
	g.Expect(errors.As(notFound, &gone)).To(BeTrue())
	g.Expect(notFound.Error()).To(Equal("Issuer ca not found"))
	timeout := apierrors.NewTimeoutError("the API server did not answer", 1)
	transient := readError(timeout, "Issuer ca")
	g.Expect(errors.As(transient, &gone)).To(BeFalse())
	g.Expect(errors.Is(transient, timeout)).To(BeTrue())
	g.Expect(transient.Error()).To(HavePrefix("reading Issuer ca: "))
}
