package certificate_test

import (
	"context"
	"crypto"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/testenv"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	"github.com/converge-dev/converge/pkg/contract/issuer/conformance"
)

// TestIssuerConformance runs the certificate-issuer contract's conformance
// test (pkg/contract/issuer/conformance) against the built-in CA and
// selfSigned issuers and against an out-of-tree issuer made here.
func TestIssuerConformance(t *testing.T) {
	testenv.Need(t, env)
	// The broken-CSR case stores its request past the webhook, so that the
	// issuer itself is shown to refuse it.
	env.SkipValidationForLabelled(t)
	skip := func(obj client.Object) {
		l := obj.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[testenv.NoValidationLabel] = "true"
		obj.SetLabels(l)
	}

	t.Run("ca", func(t *testing.T) {
		g := NewWithT(t)
		ns := env.NewNamespace(t)
		selfSignedIssuer(t, ns, "root")
		ca := newCert(ns, "ca", "root")
		ca.Spec.IsCA, ca.Spec.CommonName, ca.Spec.SecretName = true, "conformance CA", "ca"
		g.Expect(env.Client.Create(t.Context(), ca)).To(Succeed())
		g.Expect(env.Client.Create(t.Context(), &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"},
			Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "ca"}}})).To(Succeed())
		testenv.Eventually(g, func(g Gomega) {
			iss := &pkiv1alpha1.Issuer{}
			g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "ca"}, iss)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue())
		}).Should(Succeed())
		conformance.Run(t, conformance.Harness{Client: env.Client, Namespace: ns,
			IssuerRef:     pkiv1alpha1.IssuerReference{Name: "ca", Kind: "Issuer", Group: pkiv1alpha1.GroupVersion.Group},
			SkipAdmission: skip})
	})

	t.Run("selfSigned", func(t *testing.T) {
		ns := env.NewNamespace(t)
		selfSignedIssuer(t, ns, "self")
		conformance.Run(t, conformance.Harness{Client: env.Client, Namespace: ns,
			IssuerRef:     pkiv1alpha1.IssuerReference{Name: "self", Kind: "Issuer", Group: pkiv1alpha1.GroupVersion.Group},
			SkipAdmission: skip,
			// A selfSigned issuer signs with the request's own key, which
			// the Certificate controller keeps in a Secret it names.
			Prepare: func(t *testing.T, cr *pkiv1alpha1.CertificateRequest, key crypto.Signer) {
				pemKey, err := pki.EncodeKey(key, "PKCS8")
				if err != nil {
					t.Fatal(err)
				}
				sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cr.Name + "-key"},
					Data: map[string][]byte{corev1.TLSPrivateKeyKey: pemKey}}
				if err := env.Client.Create(t.Context(), sec); err != nil {
					t.Fatal(err)
				}
				cr.Annotations = map[string]string{pkiv1alpha1.PrivateKeySecretAnnotation: sec.Name}
			}})
	})

	t.Run("out-of-tree", func(t *testing.T) {
		ns := env.NewNamespace(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		installIssuerKind(t, "VaultIssuer")
		go externalSigner(ctx, t, ns, "issuers.example.com")
		conformance.Run(t, conformance.Harness{Client: env.Client, Namespace: ns,
			IssuerRef:     pkiv1alpha1.IssuerReference{Name: "vault", Kind: "VaultIssuer", Group: "issuers.example.com"},
			SkipAdmission: skip})
	})
}

// installIssuerKind installs the out-of-tree issuer kind of group
// issuers.example.com, its CRD declaring the issuer contract: a Certificate
// names no kind that does not.
func installIssuerKind(t *testing.T, kind string) {
	env.InstallThirdPartyCRD(t, schema.GroupVersionKind{Group: "issuers.example.com", Version: "v1", Kind: kind}, pcontract.Issuer)
}

// externalSigner is a minimal out-of-tree issuer: it signs, from its own CA,
// the CertificateRequests of its group that nobody answered yet, and fails
// those it cannot sign, as docs/contracts/certificate-issuer.md says.
func externalSigner(ctx context.Context, t *testing.T, ns, group string) {
	caKey, _ := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	caCSRPEM, _ := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{CommonName: "external CA"}, caKey)
	caCSR, _ := pki.ParseCSR(caCSRPEM)
	caTmpl, _ := pki.Template(caCSR, time.Hour, nil, true, time.Now())
	caPEM, _ := pki.Sign(caTmpl, nil, caKey)
	caCert, _ := pki.ParseCerts(caPEM)
	for ctx.Err() == nil {
		var list pkiv1alpha1.CertificateRequestList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err == nil {
			for i := range list.Items {
				cr := &list.Items[i]
				if cr.Spec.IssuerRef.Group != group || len(cr.Status.Conditions) > 0 {
					continue
				}
				csr, err := pki.ParseCSR(cr.Spec.Request)
				var leaf []byte
				if err == nil {
					var tmpl, _ = pki.Template(csr, cr.Spec.Duration.Duration, cr.Spec.Usages, cr.Spec.IsCA, time.Now())
					leaf, err = pki.Sign(tmpl, caCert[0], caKey)
				}
				if err != nil {
					meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: pkiv1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: pkiv1alpha1.FailedReason, Message: err.Error()})
					cr.Status.FailureTime = &metav1.Time{Time: time.Now()}
				} else {
					cr.Status.Certificate, cr.Status.CA = leaf, caPEM
					meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: pkiv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: pkiv1alpha1.IssuedReason, Message: "signed"})
				}
				if err := env.Client.Status().Update(ctx, cr); err != nil && ctx.Err() == nil {
					t.Logf("external signer: %v", err)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
