package sync_test

import (
	"crypto/x509"
	"encoding/pem"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

const pkiIssuer = `apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata:
  name: selfsigned
spec:
  selfSigned: {}
`

const pkiCertificate = `apiVersion: pki.converge.dev/v1alpha1
kind: Certificate
metadata:
  name: web
spec:
  secretName: web-tls
  commonName: web.example.com
  dnsNames: [web.example.com]
  issuerRef: {name: selfsigned}
  privateKey: {algorithm: ECDSA}
`

// TestCertificateFromGit is patterns 1 and 2 together: a commit holding an
// Issuer and a Certificate, applied by a Sync acting as the namespace's
// tenant, gives a TLS Secret whose certificate verifies against its ca.crt;
// deleting the Secret brings it back (the Certificate controller, not the
// Sync, owns it); a commit removing the Certificate prunes it, and the
// Secret, which the Certificate did not own, stays for the workload using it.
func TestCertificateFromGit(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	repo, h1, gr := setupRepo(t, ns, map[string]string{"pki/issuer.yaml": pkiIssuer, "pki/certificate.yaml": pkiCertificate})
	g.Expect(env.Client.Create(ctx, newSync(ns, "pki", "app", "pki", true))).To(Succeed())
	waitApplied(t, g, ns, "pki", h1)

	verified := func(not []byte) []byte {
		t.Helper()
		var crt []byte
		testenv.Eventually(g, func(g Gomega) {
			s := &corev1.Secret{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-tls"}, s)).To(Succeed())
			g.Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
			crt = s.Data["tls.crt"]
			g.Expect(crt).NotTo(Equal(not))
			blk, _ := pem.Decode(crt)
			g.Expect(blk).NotTo(BeNil())
			leaf, err := x509.ParseCertificate(blk.Bytes)
			g.Expect(err).NotTo(HaveOccurred())
			roots := x509.NewCertPool()
			g.Expect(roots.AppendCertsFromPEM(s.Data["ca.crt"])).To(BeTrue())
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "web.example.com"})
			g.Expect(err).NotTo(HaveOccurred())
		}).Should(Succeed())
		return crt
	}
	first := verified(nil)

	g.Expect(env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-tls"}})).To(Succeed())
	verified(first)

	h2 := repo.Delete(t, "remove the certificate", "pki/certificate.yaml")
	requestReconcile(t, gr)
	waitApplied(t, g, ns, "pki", h2)
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &pkiv1alpha1.Certificate{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "pruned: %v", err)
	}).Should(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-tls"}, &corev1.Secret{})).To(Succeed(),
		"the Secret was not the Certificate's to take down")
}
