package cainjector_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/cainjector"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/testenv"
)

// caCertificate creates a selfSigned Issuer and a CA Certificate named name
// whose Secret is name.
func caCertificate(t *testing.T, ns, name string) {
	t.Helper()
	ctx := t.Context()
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-root"},
		Spec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}}
	if err := env.Client.Create(ctx, iss); err != nil {
		t.Fatal(err)
	}
	c := &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: pkiv1alpha1.CertificateSpec{
		SecretName: name, CommonName: "injector test CA " + name, IsCA: true,
		IssuerRef:  pkiv1alpha1.IssuerReference{Name: name + "-root"},
		PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm},
	}}
	if err := env.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// caOf waits for the Secret's ca.crt to differ from not and returns it.
func caOf(t *testing.T, g Gomega, ns, name string, not []byte) []byte {
	t.Helper()
	var ca []byte
	testenv.Eventually(g, func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		ca = s.Data["ca.crt"]
		g.Expect(ca).NotTo(BeEmpty())
		g.Expect(ca).NotTo(Equal(not))
	}).Should(Succeed())
	return ca
}

// create creates a cluster-scoped object from YAML (with %[1]s the suffix and
// %[2]s the annotation value) and deletes it at the end of the test.
func create(t *testing.T, manifest, suffix, ref string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(manifest, suffix, ref)), &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(t.Context(), u); err != nil {
		t.Fatalf("creating %s: %v", u.GetKind(), err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), u); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	})
	return u
}

const webhookYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: %[3]s
metadata:
  name: inject-%[1]s
  annotations:
    pki.converge.dev/inject-ca-from: %[2]s
webhooks:
- name: a.inject.test.converge.dev
  clientConfig: {url: "https://127.0.0.1:1/a"}
  rules: [{apiGroups: ["inject.test.converge.dev"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["nothings"]}]
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
- name: b.inject.test.converge.dev
  clientConfig: {url: "https://127.0.0.1:1/b", caBundle: %[4]s}
  rules: [{apiGroups: ["inject.test.converge.dev"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["nothings"]}]
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
`

const crdYAML = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[1]s.inject.converge.dev
  annotations:
    pki.converge.dev/inject-ca-from: %[2]s
spec:
  group: %[1]s.inject.converge.dev
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig: {url: "https://127.0.0.1:1/convert"}
`

const apiServiceYAML = `
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1.%[1]s.inject.converge.dev
  annotations:
    pki.converge.dev/inject-ca-from: %[2]s
spec:
  group: %[1]s.inject.converge.dev
  version: v1
  service: {namespace: default, name: converge-inject-test-nothing, port: 443}
  groupPriorityMinimum: 1000
  versionPriority: 15
`

// injected reads every caBundle of the object.
func injected(t *testing.T, g Gomega, u *unstructured.Unstructured) [][]byte {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(u.GroupVersionKind())
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), got)).To(Succeed())
	var raw []string
	switch got.GetKind() {
	case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		ws, _, _ := unstructured.NestedSlice(got.Object, "webhooks")
		for _, w := range ws {
			s, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "caBundle")
			raw = append(raw, s)
		}
	case "CustomResourceDefinition":
		s, _, _ := unstructured.NestedString(got.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		raw = append(raw, s)
	case "APIService":
		s, _, _ := unstructured.NestedString(got.Object, "spec", "caBundle")
		raw = append(raw, s)
	}
	var out [][]byte
	for _, s := range raw {
		b, err := base64.StdEncoding.DecodeString(s)
		g.Expect(err).NotTo(HaveOccurred())
		out = append(out, b)
	}
	return out
}

func certs(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err == nil {
			out = append(out, c)
		}
	}
}

// hasEvent reports whether an Event with the reason (and message part) was
// recorded about the cluster-scoped object name.
func hasEvent(t *testing.T, g Gomega, name, reason, part string) bool {
	t.Helper()
	list := &eventsv1.EventList{}
	g.Expect(env.Client.List(t.Context(), list)).To(Succeed())
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, part) {
			return true
		}
	}
	return false
}

// foreignLeaf signs a certificate with the CA in Secret ns/ca and stores it
// in namespace other, labelled as an issued Secret whose data is cached: a
// tenant's copy of a certificate from that CA.
func foreignLeaf(t *testing.T, g Gomega, ns, ca, other string) {
	t.Helper()
	s := &corev1.Secret{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: ca}, s)).To(Succeed())
	caCert, err := pki.ParseCerts(s.Data[corev1.TLSCertKey])
	g.Expect(err).NotTo(HaveOccurred())
	caKey, err := pki.ParseKey(s.Data[corev1.TLSPrivateKeyKey])
	g.Expect(err).NotTo(HaveOccurred())
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tenant"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: caCert[0].NotAfter}
	der, err := x509.CreateCertificate(rand.Reader, tpl, caCert[0], &key.PublicKey, caKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "copy",
		Labels: map[string]string{pkiv1alpha1.CertificateNameLabel: "copy", secretcache.Label: "true"}},
		Data: map[string][]byte{corev1.TLSCertKey: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}})).To(Succeed())
}

// TestInjectsIntoEveryKindAndFollowsRotation: a CA Certificate's bundle is
// written into both webhooks of a validating and a mutating configuration,
// a CRD's conversion webhook and an APIService. When the CA rotates (its
// Secret is deleted and reissued with a new key), each trusts the new and
// the old CA for the overlap, then only the new one. A certificate from the
// old CA in an issued Secret of another namespace (a tenant's) does not
// hold the overlap.
func TestInjectsIntoEveryKindAndFollowsRotation(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	caCertificate(t, ns, "ca")
	ca1 := caOf(t, g, ns, "ca", nil)
	ref := ns + "/ca"
	suffix := strings.ToLower(ns)
	objs := []*unstructured.Unstructured{
		create(t, fmt.Sprintf(webhookYAML, "%[1]s", "%[2]s", "ValidatingWebhookConfiguration", `""`), "v-"+suffix, ref),
		create(t, fmt.Sprintf(webhookYAML, "%[1]s", "%[2]s", "MutatingWebhookConfiguration", `""`), "m-"+suffix, ref),
		create(t, crdYAML, suffix, ref),
		create(t, apiServiceYAML, "api-"+suffix, ref), // not the CRD's group: that APIService is the API server's own
	}
	want := func(bundle []byte) {
		t.Helper()
		for _, u := range objs {
			testenv.Eventually(g, func(g Gomega) {
				got := injected(t, g, u)
				g.Expect(got).NotTo(BeEmpty())
				for _, b := range got {
					g.Expect(certs(b)).To(Equal(certs(bundle)), "%s %s", u.GetKind(), u.GetName())
				}
			}).Should(Succeed())
		}
	}
	want(ca1)
	g.Expect(hasEvent(t, g, objs[0].GetName(), cainjector.InjectedReason, "CA bundle of Certificate "+ref)).To(BeTrue())

	foreignLeaf(t, g, ns, "ca", env.NewNamespace(t))

	// Rotate: a new key, so a new CA certificate.
	g.Expect(env.Client.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"}})).To(Succeed())
	ca2 := caOf(t, g, ns, "ca", ca1)
	g.Expect(certs(ca2)[0].PublicKey).NotTo(Equal(certs(ca1)[0].PublicKey))
	want(append(append([]byte{}, ca2...), ca1...))
	for _, u := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), got)).To(Succeed())
		g.Expect(got.GetAnnotations()).To(HaveKey(cainjector.OverlapUntilAnnotation))
	}
	// After the overlap, only the new CA.
	time.Sleep(overlap / 2)
	want(ca2)
	for _, u := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), got)).To(Succeed())
		g.Expect(got.GetAnnotations()).NotTo(HaveKey(cainjector.OverlapUntilAnnotation))
	}
}

// TestInjectionWaitsForTheCA: an annotation naming a Certificate that does
// not exist yet leaves the object's bundle as the user set it and says why
// in an Event; a malformed annotation is named; once the Certificate is
// issued the bundle is injected.
func TestInjectionWaitsForTheCA(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	suffix := strings.ToLower(ns)
	userCA := base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"))
	later := create(t, fmt.Sprintf(webhookYAML, "%[1]s", "%[2]s", "ValidatingWebhookConfiguration", userCA), "later-"+suffix, ns+"/later")
	bad := create(t, fmt.Sprintf(webhookYAML, "%[1]s", "%[2]s", "MutatingWebhookConfiguration", `""`), "bad-"+suffix, "no-slash")

	testenv.Eventually(g, func(g Gomega) {
		g.Expect(hasEvent(t, g, later.GetName(), cainjector.CANotAvailableReason, fmt.Sprintf("Certificate %s/later not found", ns))).To(BeTrue())
		g.Expect(hasEvent(t, g, bad.GetName(), cainjector.InvalidAnnotationReason, `must be <namespace>/<certificate>, got "no-slash"`)).To(BeTrue())
	}).Should(Succeed())
	got := injected(t, g, later)
	g.Expect(base64.StdEncoding.EncodeToString(got[1])).To(Equal(userCA), "left as the user set it")

	caCertificate(t, ns, "later")
	ca := caOf(t, g, ns, "later", nil)
	testenv.Eventually(g, func(g Gomega) {
		for _, b := range injected(t, g, later) {
			g.Expect(certs(b)).To(Equal(certs(ca)))
		}
	}).Should(Succeed())
}

// TestIssuerGoneFallsBackToCACrt: the injected Certificate is issued by a
// CA Issuer, whose CA the bundle adds. When the Issuer's CA Secret is
// missing, holds no certificate, or the Issuer is deleted, an
// IssuerCAUnavailable Warning Event on the object names what is gone, and
// the bundle is the Certificate's ca.crt alone: kept in an object injected
// before (the Issuer watch wakes it), and injected into objects created
// after, not left empty. Each case has an object of its own: the event
// recorder folds Events of one reason about one object into a series that
// keeps the first message.
func TestIssuerGoneFallsBackToCACrt(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	suffix := strings.ToLower(ns)
	caCertificate(t, ns, "ca")
	issuer := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca-issuer"},
		Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "ca"}}}
	g.Expect(env.Client.Create(ctx, issuer)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "serving"},
		Spec: pkiv1alpha1.CertificateSpec{SecretName: "serving", DNSNames: []string{"serving.example"},
			IssuerRef:  pkiv1alpha1.IssuerReference{Name: issuer.Name},
			PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm}}})).To(Succeed())
	ca := caOf(t, g, ns, "serving", nil)
	ref := ns + "/serving"
	// warned waits for the Event on u and for u's bundle to be ca.crt.
	warned := func(u *unstructured.Unstructured, part string) {
		t.Helper()
		testenv.Eventually(g, func(g Gomega) {
			g.Expect(hasEvent(t, g, u.GetName(), cainjector.IssuerCAUnavailableReason, part)).To(BeTrue(), "an Event on %s: %s", u.GetName(), part)
			got := injected(t, g, u)
			g.Expect(got).To(HaveLen(2))
			for _, b := range got {
				g.Expect(certs(b)).To(Equal(certs(ca)), "the bundle of %s is the ca.crt", u.GetName())
			}
		}).Should(Succeed())
	}
	target := func(name string) *unstructured.Unstructured {
		return create(t, fmt.Sprintf(webhookYAML, "%[1]s", "%[2]s", "ValidatingWebhookConfiguration", `""`), name+"-"+suffix, ref)
	}
	useSecret := func(name string) {
		t.Helper()
		base := issuer.DeepCopy()
		issuer.Spec.CA.SecretName = name
		g.Expect(env.Client.Patch(ctx, issuer, client.MergeFrom(base))).To(Succeed())
	}

	before := target("issuer-before")
	testenv.Eventually(g, func(g Gomega) {
		for _, b := range injected(t, g, before) {
			g.Expect(certs(b)).To(Equal(certs(ca)))
		}
	}).Should(Succeed())
	g.Expect(hasEvent(t, g, before.GetName(), cainjector.IssuerCAUnavailableReason, "")).To(BeFalse(), "no warning while the Issuer's CA is there")

	useSecret("missing")
	warned(before, fmt.Sprintf("CA Secret %s/missing of Issuer ca-issuer not found", ns))

	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "empty"},
		Data: map[string][]byte{"note": []byte("no certificate here")}})).To(Succeed())
	useSecret("empty")
	warned(target("issuer-empty"), fmt.Sprintf("CA Secret %s/empty of Issuer ca-issuer holds no certificate", ns))

	g.Expect(env.Client.Delete(ctx, issuer)).To(Succeed())
	warned(target("issuer-after"), fmt.Sprintf("Issuer ca-issuer of Certificate %s not found", ref))
	warned(before, "")
}
