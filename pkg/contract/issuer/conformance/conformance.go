// Package conformance is the certificate-issuer contract's conformance test
// (docs/contracts/certificate-issuer.md): a Go test helper that any issuer
// (built in or third party) runs against a real API server with its
// controller running, to show that Converge's Certificates work with it.
//
//	conformance.Run(t, conformance.Harness{
//		Client: c, Namespace: ns,
//		IssuerRef: pkiv1alpha1.IssuerReference{Group: "issuers.example.com", Kind: "VaultIssuer", Name: "vault"},
//	})
//
// It checks, with CertificateRequests as the Certificate controller makes
// them: a valid request is signed (Ready=True reason Issued, a PEM chain
// whose leaf holds the request's public key, names and usages, verifying
// against status.ca when one is given, within the requested duration); a
// request whose CSR signature is broken is never Issued but Failed (or
// InvalidRequest / Denied); and a request for another issuer group is left
// untouched; and, for an issuer of another group than pki.converge.dev,
// that its kind declares the issuer contract (a namespaced kind whose
// CustomResourceDefinition carries the label contract.converge.dev/issuer:
// v1alpha1): a Certificate naming any other kind is refused.
package conformance

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	"github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/runtime/schema"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	pcontract "github.com/converge-dev/converge/pkg/contract"
)

// Harness describes the issuer under test.
type Harness struct {
	// Client reaches the API server (uncached).
	Client client.Client
	// Namespace holds the requests the test creates (and a namespaced
	// issuer).
	Namespace string
	// IssuerRef names the issuer, as a Certificate's spec.issuerRef would.
	IssuerRef pkiv1alpha1.IssuerReference
	// Prepare, when set, adds what this issuer needs beside the request
	// before it is created (a selfSigned issuer reads the private key from
	// a Secret named by an annotation).
	Prepare func(t *testing.T, cr *pkiv1alpha1.CertificateRequest, key crypto.Signer)
	// Timeout bounds each wait; 60 s when zero.
	Timeout time.Duration
	// SkipAdmission, when set, marks the request with a broken CSR so that
	// Converge's validating webhook (which checks every CSR's signature)
	// lets it be stored: the issuer must still never sign it, since such a
	// request can exist (stored while the webhook was down, or before the
	// check existed). In Converge's own tests it sets
	// testenv.NoValidationLabel after Environment.SkipValidationForLabelled.
	// Without it a request refused at admission skips that case: it did
	// not run, and says so.
	SkipAdmission func(obj client.Object)
}

func (h Harness) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return 60 * time.Second
}

// DNSName is the name every conformance request asks for.
const DNSName = "conformance.example.com"

// Run runs every check as a subtest.
func Run(t *testing.T, h Harness) {
	t.Helper()
	t.Run("signs a valid request", func(t *testing.T) { h.signs(t) })
	t.Run("never issues a request with a broken CSR", func(t *testing.T) { h.refusesBrokenCSR(t) })
	t.Run("leaves other issuers' requests alone", func(t *testing.T) { h.leavesOthersAlone(t) })
	if h.IssuerRef.Group != "" && h.IssuerRef.Group != pkiv1alpha1.GroupVersion.Group {
		t.Run("declares the issuer contract", func(t *testing.T) { h.declaresContract(t) })
	}
}

// declaresContract checks, as the Certificate webhook and controller do,
// that the issuer's kind declares the issuer contract.
func (h Harness) declaresContract(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: h.IssuerRef.Group, Kind: h.IssuerRef.Kind}
	k := pcontract.Checker{Reader: h.Client, Mapper: h.Client.RESTMapper()}
	if err := k.Check(t.Context(), gvk, pcontract.Issuer); err != nil {
		t.Fatalf("a Certificate cannot name this issuer: %v", err)
	}
}

// CSR makes a key and a PEM CSR for DNSName, as the Certificate controller
// does.
func CSR(t *testing.T) (crypto.Signer, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: DNSName}, DNSNames: []string{DNSName}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func (h Harness) request(t *testing.T, name string, csr []byte, key crypto.Signer, ref pkiv1alpha1.IssuerReference) *pkiv1alpha1.CertificateRequest {
	t.Helper()
	cr, err := h.tryRequest(t, name, csr, key, ref, nil)
	if err != nil {
		t.Fatalf("creating CertificateRequest %s: %v", name, err)
	}
	return cr
}

func (h Harness) tryRequest(t *testing.T, name string, csr []byte, key crypto.Signer, ref pkiv1alpha1.IssuerReference, mark func(client.Object)) (*pkiv1alpha1.CertificateRequest, error) {
	t.Helper()
	cr := &pkiv1alpha1.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: name},
		Spec: pkiv1alpha1.CertificateRequestSpec{
			Request: csr, IssuerRef: ref, Duration: &metav1.Duration{Duration: 2 * time.Hour},
			Usages: []pkiv1alpha1.KeyUsage{"digital signature", "key encipherment", "server auth"},
		},
	}
	if h.Prepare != nil {
		h.Prepare(t, cr, key)
	}
	if mark != nil {
		mark(cr)
	}
	return cr, h.Client.Create(t.Context(), cr)
}

func (h Harness) signs(t *testing.T) {
	g := gomega.NewWithT(t)
	key, csr := CSR(t)
	cr := h.request(t, "conformance-signs", csr, key, h.IssuerRef)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(h.Client.Get(t.Context(), client.ObjectKeyFromObject(cr), cr)).To(gomega.Succeed())
		c := meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(gomega.BeNil(), "no Ready condition yet")
		g.Expect(c.Status).To(gomega.Equal(metav1.ConditionTrue), "Ready: %s: %s", c.Reason, c.Message)
		g.Expect(c.Reason).To(gomega.Equal(pkiv1alpha1.IssuedReason))
	}).WithTimeout(h.timeout()).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
	chain, err := parseChain(cr.Status.Certificate)
	g.Expect(err).NotTo(gomega.HaveOccurred(), "status.certificate")
	leaf := chain[0]
	g.Expect(leaf.PublicKey).To(gomega.Equal(key.Public()), "the leaf is for the request's key")
	g.Expect(leaf.DNSNames).To(gomega.ContainElement(DNSName))
	g.Expect(leaf.ExtKeyUsage).To(gomega.ContainElement(x509.ExtKeyUsageServerAuth), "the requested usages")
	g.Expect(leaf.NotAfter.Sub(leaf.NotBefore)).To(gomega.BeNumerically("<=", 2*time.Hour+5*time.Minute), "within the requested duration")
	if len(cr.Status.CA) > 0 {
		roots, err := parseChain(cr.Status.CA)
		g.Expect(err).NotTo(gomega.HaveOccurred(), "status.ca")
		pool, inter := x509.NewCertPool(), x509.NewCertPool()
		for _, c := range roots {
			pool.AddCert(c)
		}
		for _, c := range chain[1:] {
			inter.AddCert(c)
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: DNSName,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		g.Expect(err).NotTo(gomega.HaveOccurred(), "the chain verifies against status.ca")
	}
}

func (h Harness) refusesBrokenCSR(t *testing.T) {
	g := gomega.NewWithT(t)
	key, csr := CSR(t)
	blk, _ := pem.Decode(csr)
	der := append([]byte{}, blk.Bytes...)
	der[len(der)-1] ^= 0xff // the last byte is in the signature
	broken := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	cr, err := h.tryRequest(t, "conformance-broken", broken, key, h.IssuerRef, h.SkipAdmission)
	// The API server applies a change to the webhook configuration (what
	// SkipAdmission relies on) asynchronously: retry the marked write a
	// while before calling it refused.
	for deadline := time.Now().Add(h.timeout()); h.SkipAdmission != nil && apierrors.IsInvalid(err) && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		cr, err = h.tryRequest(t, "conformance-broken", broken, key, h.IssuerRef, h.SkipAdmission)
	}
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		// Refused at admission (Converge's webhook checks every CSR's
		// signature, whatever the group): the issuer is not exercised.
		if h.SkipAdmission != nil {
			t.Fatalf("the request with a broken CSR was refused at admission although SkipAdmission marked it: %v", err)
		}
		t.Skipf("the request with a broken CSR was refused at admission, so the issuer was not tested on it: set Harness.SkipAdmission (%v)", err)
	}
	g.Expect(err).NotTo(gomega.HaveOccurred(), "creating the request")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(h.Client.Get(t.Context(), client.ObjectKeyFromObject(cr), cr)).To(gomega.Succeed())
		c := meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(gomega.BeNil(), "no Ready condition yet")
		g.Expect(c.Reason).NotTo(gomega.Equal(pkiv1alpha1.IssuedReason), "a broken CSR was signed")
		finished := c.Reason == pkiv1alpha1.FailedReason ||
			meta.IsStatusConditionTrue(cr.Status.Conditions, pkiv1alpha1.InvalidRequestCondition) ||
			meta.IsStatusConditionTrue(cr.Status.Conditions, pkiv1alpha1.DeniedCondition)
		g.Expect(finished).To(gomega.BeTrue(), "Ready: %s: %s", c.Reason, c.Message)
		g.Expect(cr.Status.Certificate).To(gomega.BeEmpty())
	}).WithTimeout(h.timeout()).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
}

func (h Harness) leavesOthersAlone(t *testing.T) {
	g := gomega.NewWithT(t)
	key, csr := CSR(t)
	other := pkiv1alpha1.IssuerReference{Group: "conformance.invalid", Kind: "NobodysIssuer", Name: h.IssuerRef.Name}
	cr := h.request(t, "conformance-other", csr, key, other)
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(h.Client.Get(t.Context(), client.ObjectKeyFromObject(cr), cr)).To(gomega.Succeed())
		g.Expect(cr.Status.Conditions).To(gomega.BeEmpty(), "a request for group %s was touched", other.Group)
		g.Expect(cr.Status.Certificate).To(gomega.BeEmpty())
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
}

func parseChain(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return out, nil
}
