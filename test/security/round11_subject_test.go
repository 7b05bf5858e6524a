package security

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// A CA ClusterIssuer copied the request's whole subject into the leaf:
// tenant A, writing its own CertificateRequest, got a leaf for
// CN=admin,O=system:masters — cluster-admin to any API server that takes the
// cluster CA as a client CA, and a group claim to every client that reads
// organizations. Now a tenant's request carries a common name and nothing
// else of a subject (no Certificate asks for more): anything else is Denied
// IssuerPolicyDenied naming the attribute, and nothing is signed. A common
// name alone is still issued.
func TestClusterIssuerSignsNoSubjectBeyondTheCommonName(t *testing.T) {
	attacker := newTenant(t)
	g := NewWithT(t)
	a := attacker.NS
	ci := clusterCA(t, g, "cluster-subject-"+a, nil)
	ref := pkiv1alpha1.IssuerReference{Kind: "ClusterIssuer", Name: ci.Name}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	csr := func(s pkix.Name) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: s, DNSNames: []string{"web." + a + ".svc"}}, key)
		g.Expect(err).NotTo(HaveOccurred())
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	for name, c := range map[string]struct {
		subject pkix.Name
		words   string
	}{
		"masters": {pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, `organization "system:masters"`},
		"ou":      {pkix.Name{CommonName: "web." + a + ".svc", OrganizationalUnit: []string{"payments"}}, `organizational unit "payments"`},
	} {
		cr := askWithCSR(t, g, attacker, ref, "", name, csr(c.subject), 30*time.Second)
		expectDenied(g, cr, c.words, `ClusterIssuer "`+ci.Name+`"`, "common name only")
	}
	ok := askWithCSR(t, g, attacker, ref, "", "cn", csr(pkix.Name{CommonName: "web." + a + ".svc"}), 30*time.Second)
	testenv.HasCondition(g, ok.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.IssuedReason)
	block, _ := pem.Decode(ok.Status.Certificate)
	g.Expect(block).NotTo(BeNil())
	leaf, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(leaf.Subject.Organization).To(BeEmpty())
	g.Expect(leaf.Subject.CommonName).To(Equal("web." + a + ".svc"))
}
