package certificate_test

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/acme/pebbletest"
	"github.com/converge-dev/converge/internal/controller/certificate"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/contract"
)

// TestSelfSigned: a selfSigned Issuer issues a Secret that verifies with its
// own ca.crt (x509, openssl, TLS handshake); the request is Issued.
func TestSelfSigned(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	selfSignedIssuer(t, ns, "selfsigned")
	c := newCert(ns, "web", "selfsigned", "web.example.com")
	c.Spec.IPAddresses = []string{"127.0.0.1"}
	c.Spec.Usages = []pkiv1alpha1.KeyUsage{"digital signature", "server auth"}
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	c = waitCert(t, g, ns, "web", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	g.Expect(*c.Status.Revision).To(BeEquivalentTo(1))
	g.Expect(c.Status.RenewalTime).NotTo(BeNil())
	g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.IssuingCondition)).To(BeNil(), "the revision and the end of the issuance are one write")
	// And it stays issued once: no second request from a leftover Issuing.
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(*c.Status.Revision).To(BeEquivalentTo(1))
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.IssuingCondition)).To(BeNil())
	}).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	s := getSecret(t, ns, "web-tls")
	g.Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
	g.Expect(s.OwnerReferences).To(BeEmpty(), "the Secret is not owned unless asked")
	verifyServing(t, g, s, s.Data["ca.crt"], "web.example.com")
	verifyServing(t, g, s, s.Data["ca.crt"], "127.0.0.1")
	// Default duration is 90 days, renewal at 2/3.
	g.Expect(c.Status.NotAfter.Sub(c.Status.NotBefore.Time)).To(BeNumerically("~", 90*24*time.Hour+time.Minute, 2*time.Second))

	var cr pkiv1alpha1.CertificateRequest
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "web-1"}, &cr)).To(Succeed())
	g.Expect(meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition).Reason).To(Equal(pkiv1alpha1.IssuedReason))
	// The next-key Secret is gone once the certificate is written.
	g.Expect(c.Status.NextPrivateKeySecretName).To(BeEmpty())
	err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "web-next-key"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
}

// TestCAIssuerAndRepair: selfSigned → CA Certificate → ca Issuer → leaf; the
// leaf verifies with ca.crt; a deleted Secret and a tampered key are
// reissued; a spec change reissues with the new name.
func TestCAIssuerAndRepair(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	selfSignedIssuer(t, ns, "bootstrap")
	ca := newCert(ns, "root", "bootstrap")
	ca.Spec.IsCA, ca.Spec.CommonName = true, "converge test root"
	g.Expect(env.Client.Create(t.Context(), ca)).To(Succeed())

	// The ca Issuer waits for its Secret.
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "root-tls"}}}
	g.Expect(env.Client.Create(t.Context(), iss)).To(Succeed())
	waitCert(t, g, ns, "root", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(iss), iss)).To(Succeed())
		g.Expect(meta.FindStatusCondition(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.IssuerReadyReason))
	}).Should(Succeed())

	leaf := newCert(ns, "api", "ca", "api.example.com")
	g.Expect(env.Client.Create(t.Context(), leaf)).To(Succeed())
	waitCert(t, g, ns, "api", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	s := getSecret(t, ns, "api-tls")
	rootSecret := getSecret(t, ns, "root-tls")
	g.Expect(s.Data["ca.crt"]).To(Equal(rootSecret.Data[corev1.TLSCertKey]))
	verifyServing(t, g, s, s.Data["ca.crt"], "api.example.com")
	firstKey := string(s.Data[corev1.TLSPrivateKeyKey])

	// Deleted: reissued with a new key (rotationPolicy Always).
	g.Expect(env.Client.Delete(t.Context(), s)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		var again corev1.Secret
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), &again)).To(Succeed())
		g.Expect(string(again.Data[corev1.TLSPrivateKeyKey])).NotTo(Equal(firstKey))
		verifyServing(t, g, &again, again.Data["ca.crt"], "api.example.com")
	}).Should(Succeed())

	// Tampered: another key in tls.key is replaced by a matching pair.
	s = getSecret(t, ns, "api-tls")
	other, _ := pki.GenerateKey(pki.ResolveKey(&pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm}))
	otherPEM, _ := pki.EncodeKey(other, pkiv1alpha1.PKCS1)
	s.Data[corev1.TLSPrivateKeyKey] = otherPEM
	g.Expect(env.Client.Update(t.Context(), s)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		var again corev1.Secret
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), &again)).To(Succeed())
		g.Expect(string(again.Data[corev1.TLSPrivateKeyKey])).NotTo(Equal(string(otherPEM)))
		verifyServing(t, g, &again, again.Data["ca.crt"], "api.example.com")
	}).Should(Succeed())

	// Spec change: a new name is reissued.
	// Retried on conflicts with the controller's status writes.
	testenv.Eventually(g, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(leaf), leaf); err != nil {
			return err
		}
		leaf.Spec.DNSNames = []string{"api.example.com", "api2.example.com"}
		return env.Client.Update(t.Context(), leaf)
	}).Should(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		var again corev1.Secret
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), &again)).To(Succeed())
		chain, err := pki.ParseCerts(again.Data[corev1.TLSCertKey])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(chain[0].DNSNames).To(ConsistOf("api.example.com", "api2.example.com"))
	}).Should(Succeed())
	c := waitCert(t, g, ns, "api", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	g.Expect(*c.Status.Revision).To(BeNumerically(">=", 4))
	// revisionHistoryLimit 1: only the last request is kept.
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(env.Client.List(t.Context(), &crs, client.InNamespace(ns), client.MatchingLabels{pkiv1alpha1.CertificateNameLabel: "api"})).To(Succeed())
	g.Expect(crs.Items).To(HaveLen(1))
}

// TestRenewalAndRotationPolicy: a 4s certificate is renewed at 2/3 of its
// lifetime, with a new key by default and the same key with rotationPolicy
// Never.
func TestRenewalAndRotationPolicy(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	selfSignedIssuer(t, ns, "selfsigned")
	for _, policy := range []string{pkiv1alpha1.RotationPolicyAlways, pkiv1alpha1.RotationPolicyNever} {
		name := "short-" + map[string]string{"Always": "always", "Never": "never"}[policy]
		c := newCert(ns, name, "selfsigned", name+".example.com")
		c.Spec.Duration = &metav1.Duration{Duration: 4 * time.Second}
		c.Spec.PrivateKey.RotationPolicy = policy
		g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	}
	for _, name := range []string{"short-always", "short-never"} {
		waitCert(t, g, ns, name, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
		first := getSecret(t, ns, name+"-tls")
		var again *corev1.Secret
		g.Eventually(func(g Gomega) {
			again = getSecret(t, ns, name+"-tls")
			g.Expect(again.Data[corev1.TLSCertKey]).NotTo(Equal(first.Data[corev1.TLSCertKey]), "renewed")
		}).WithTimeout(30 * time.Second).Should(Succeed())
		if name == "short-never" {
			g.Expect(again.Data[corev1.TLSPrivateKeyKey]).To(Equal(first.Data[corev1.TLSPrivateKeyKey]), "rotationPolicy Never keeps the key")
		} else {
			g.Expect(again.Data[corev1.TLSPrivateKeyKey]).NotTo(Equal(first.Data[corev1.TLSPrivateKeyKey]), "rotationPolicy Always makes a new key")
		}
	}
}

// TestSecretNotOwned: a Secret the Certificate did not write is never
// overwritten; once it is deleted, the Certificate issues.
func TestSecretNotOwned(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	selfSignedIssuer(t, ns, "selfsigned")
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-tls"}, Data: map[string][]byte{"password": []byte("keep me")}}
	g.Expect(env.Client.Create(t.Context(), foreign)).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), newCert(ns, "app", "selfsigned", "app.example.com"))).To(Succeed())
	waitCert(t, g, ns, "app", pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.SecretNotOwnedReason)
	waitCert(t, g, ns, "app", pkiv1alpha1.StalledCondition, metav1.ConditionTrue, pkiv1alpha1.SecretNotOwnedReason)
	g.Consistently(func(g Gomega) {
		s := getSecret(t, ns, "app-tls")
		g.Expect(s.Data).To(Equal(map[string][]byte{"password": []byte("keep me")}))
	}).WithTimeout(2 * time.Second).Should(Succeed())
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(env.Client.List(t.Context(), &crs, client.InNamespace(ns))).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty(), "nothing is requested for a Secret that cannot be written")
	g.Expect(env.Client.Delete(t.Context(), foreign)).To(Succeed())
	waitCert(t, g, ns, "app", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
}

// TestIssuerMissingThenNotReady: the Certificate says which, and issues once
// the issuer can sign. The request waits as Pending.
func TestIssuerMissingThenNotReady(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	g.Expect(env.Client.Create(t.Context(), newCert(ns, "late", "ca", "late.example.com"))).To(Succeed())
	waitCert(t, g, ns, "late", pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.IssuerNotFoundReason)

	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "ca-keypair"}}}
	g.Expect(env.Client.Create(t.Context(), iss)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(iss), iss)).To(Succeed())
		cond := meta.FindStatusCondition(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(pkiv1alpha1.CASecretInvalidReason))
		g.Expect(cond.Message).To(ContainSubstring("not found"))
	}).Should(Succeed())
	// The first IssuerNotReady may come before the issuer's own check
	// ("not checked yet"); wait for the one that names the Secret.
	testenv.Eventually(g, func(g Gomega) {
		c := waitCert(t, g, ns, "late", pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.IssuerNotReadyReason)
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition).Message).To(ContainSubstring("ca-keypair"))
	}).Should(Succeed())

	// A Secret holding a non-CA certificate is refused, naming why.
	selfSignedIssuer(t, ns, "selfsigned")
	notCA := newCert(ns, "notca", "selfsigned", "x.example.com")
	notCA.Spec.SecretName = "ca-keypair"
	g.Expect(env.Client.Create(t.Context(), notCA)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(iss), iss)).To(Succeed())
		g.Expect(meta.FindStatusCondition(iss.Status.Conditions, pkiv1alpha1.ReadyCondition).Message).To(ContainSubstring("not a CA"))
	}).Should(Succeed())
	// Make it a CA: the Certificate issues.
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(notCA), notCA)).To(Succeed())
		notCA.Spec.IsCA = true
		g.Expect(env.Client.Update(t.Context(), notCA)).To(Succeed())
	}).Should(Succeed())
	waitCert(t, g, ns, "late", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
}

// TestExternalIssuerAndBackoff: a Certificate naming another group's issuer
// gets a CertificateRequest that only that group's controller (here the
// test) answers: pending (RequestPending), failed (IssuanceFailed, one
// attempt counted, the next no sooner than 1h later, no new request), and
// signed.
func TestExternalIssuerAndBackoff(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	c := newCert(ns, "ext", "vault-1", "ext.example.com")
	c.Spec.IssuerRef.Group, c.Spec.IssuerRef.Kind = "issuers.example.com", "VaultIssuer"
	installIssuerKind(t, "VaultIssuer")
	testenv.Eventually(g, func() error { return env.Client.Create(t.Context(), c.DeepCopy()) }).Should(Succeed())
	waitCert(t, g, ns, "ext", pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.RequestPendingReason)
	var cr pkiv1alpha1.CertificateRequest
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "ext-1"}, &cr)).To(Succeed())
	g.Expect(cr.Status.Conditions).To(BeEmpty(), "the built-in signer leaves other groups alone")

	// The external issuer fails the request.
	meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: pkiv1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: pkiv1alpha1.FailedReason, Message: "vault said no"})
	cr.Status.FailureTime = ptr.To(metav1.Now())
	g.Expect(env.Client.Status().Update(t.Context(), &cr)).To(Succeed())
	c = waitCert(t, g, ns, "ext", pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.IssuanceFailedReason)
	g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition).Message).To(ContainSubstring("vault said no"))
	g.Expect(ptr.Deref(c.Status.FailedIssuanceAttempts, 0)).To(BeEquivalentTo(1))
	g.Expect(c.Status.NextRetryTime.Sub(c.Status.LastFailureTime.Time)).To(Equal(time.Hour))
	g.Consistently(func(g Gomega) {
		var crs pkiv1alpha1.CertificateRequestList
		g.Expect(env.Client.List(t.Context(), &crs, client.InNamespace(ns))).To(Succeed())
		g.Expect(crs.Items).To(HaveLen(1), "no new request before the backoff ends")
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(ptr.Deref(c.Status.FailedIssuanceAttempts, 0)).To(BeEquivalentTo(1), "a failed request is counted once")
	}).WithTimeout(3 * time.Second).Should(Succeed())
	// The window above only shows that nothing retried in 3 s; the hour
	// itself is proved without waiting it. The controller scheduled the
	// retry at the time it recorded (the base, read from the object), and
	// the reconciler, driven by hand with its clock one second short of
	// that time, still refuses to retry: it makes no request, counts no
	// attempt, and asks to be called again in exactly that second.
	g.Expect(c.Status.NextRetryTime).NotTo(BeNil())
	next := c.Status.NextRetryTime.Time
	g.Expect(next.Sub(c.Status.LastFailureTime.Time)).To(BeNumerically(">=", certificate.DefaultBackoffBase), "the recorded retry time is the configured base after the failure")
	hand := certificate.NewUntrackedReconciler(env.Client, env.Client, events.NewFakeRecorder(100))
	hand.Contracts = contract.Checker{Reader: env.Client, Mapper: env.Client.RESTMapper()}
	for _, at := range []time.Time{time.Now(), next.Add(-time.Minute), next.Add(-time.Second)} {
		hand.Now = func() time.Time { return at }
		res, err := hand.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.RequeueAfter).To(Equal(next.Sub(at)), "at %s the retry is still scheduled for %s", at, next)
		var crs pkiv1alpha1.CertificateRequestList
		g.Expect(env.Client.List(t.Context(), &crs, client.InNamespace(ns))).To(Succeed())
		g.Expect(crs.Items).To(HaveLen(1), "no new request at %s, before the backoff ends at %s", at, next)
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(ptr.Deref(c.Status.FailedIssuanceAttempts, 0)).To(BeEquivalentTo(1))
		g.Expect(c.Status.NextRetryTime.Time).To(BeTemporally("==", next), "the retry time does not move")
	}

	// An edit that changes no request (the Secret's labels) keeps the
	// backoff; one that does (a new name) ends it at once.
	base := c.DeepCopy()
	c.Spec.SecretTemplate = &pkiv1alpha1.SecretTemplate{Labels: map[string]string{"team": "a"}}
	g.Expect(env.Client.Patch(t.Context(), c, client.MergeFrom(base))).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(ptr.Deref(c.Status.FailedIssuanceAttempts, 0)).To(BeEquivalentTo(1), "still backing off")
	}).WithTimeout(2 * time.Second).Should(Succeed())
	base = c.DeepCopy()
	c.Spec.DNSNames = append(c.Spec.DNSNames, "ext2.example.com")
	g.Expect(env.Client.Patch(t.Context(), c, client.MergeFrom(base))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		var crs pkiv1alpha1.CertificateRequestList
		g.Expect(env.Client.List(t.Context(), &crs, client.InNamespace(ns))).To(Succeed())
		g.Expect(crs.Items).To(HaveLen(1))
		csr, err := pki.ParseCSR(crs.Items[0].Spec.Request)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(csr.DNSNames).To(ContainElement("ext2.example.com"), "a request for the new spec, long before the hour is up")
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(c.Status.FailedIssuanceAttempts).To(BeNil())
	}).Should(Succeed())
	var evs eventsv1.EventList
	g.Expect(env.Client.List(t.Context(), &evs, client.InNamespace(ns))).To(Succeed())
	g.Expect(evs.Items).To(ContainElement(HaveField("Reason", certificate.BackoffResetReason)))
}

// TestExternalIssuerSigns: the contract's happy path: the test signs the
// request as an out-of-tree issuer would, and the Certificate writes the
// Secret.
func TestExternalIssuerSigns(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	c := newCert(ns, "ext", "my-ca", "ext.example.com")
	c.Spec.IssuerRef.Group, c.Spec.IssuerRef.Kind = "issuers.example.com", "MyIssuer"
	installIssuerKind(t, "MyIssuer")
	testenv.Eventually(g, func() error { return env.Client.Create(t.Context(), c.DeepCopy()) }).Should(Succeed())
	var cr pkiv1alpha1.CertificateRequest
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "ext-1"}, &cr)).To(Succeed())
	}).Should(Succeed())
	caKey, _ := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	caCSRPEM, _ := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{CommonName: "ext ca"}, caKey)
	caCSR, _ := pki.ParseCSR(caCSRPEM)
	caTmpl, _ := pki.Template(caCSR, time.Hour, nil, true, time.Now())
	caPEM, _ := pki.Sign(caTmpl, nil, caKey)
	caCert, _ := pki.ParseCerts(caPEM)
	csr, err := pki.ParseCSR(cr.Spec.Request)
	g.Expect(err).NotTo(HaveOccurred())
	tmpl, _ := pki.Template(csr, cr.Spec.Duration.Duration, cr.Spec.Usages, cr.Spec.IsCA, time.Now())
	leaf, err := pki.Sign(tmpl, caCert[0], caKey)
	g.Expect(err).NotTo(HaveOccurred())
	cr.Status.Certificate, cr.Status.CA = leaf, caPEM
	meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: pkiv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: pkiv1alpha1.IssuedReason, Message: "signed"})
	g.Expect(env.Client.Status().Update(t.Context(), &cr)).To(Succeed())
	waitCert(t, g, ns, "ext", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	s := getSecret(t, ns, "ext-tls")
	g.Expect(s.Annotations).To(HaveKeyWithValue(pkiv1alpha1.IssuerGroupAnnotation, "issuers.example.com"))
	verifyServing(t, g, s, caPEM, "ext.example.com")
}

// TestInvalidRequest: a selfSigned request without its key annotation cannot
// be signed; one naming a missing issuer waits as Pending; one whose key
// Secret holds no key fails for good; one an approver denied stays denied.
// kstatus reads each as the request means it: refused, failed and denied
// are Failed with their reason, Pending is InProgress, the Ready issuer
// Current.
func TestInvalidRequest(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	selfSignedIssuer(t, ns, "selfsigned")
	key, _ := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	csr, _ := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{DNSNames: []string{"x.example.com"}}, key)
	g.Expect(env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "garbage"},
		Data: map[string][]byte{corev1.TLSPrivateKeyKey: []byte("not a key")}})).To(Succeed())
	for name, issuer := range map[string]string{"nokey": "selfsigned", "noissuer": "missing", "badkey": "selfsigned", "denied": "missing"} {
		cr := &pkiv1alpha1.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: pkiv1alpha1.CertificateRequestSpec{Request: csr, IssuerRef: pkiv1alpha1.IssuerReference{Name: issuer}}}
		if name == "badkey" {
			cr.Annotations = map[string]string{pkiv1alpha1.PrivateKeySecretAnnotation: "garbage"}
		}
		g.Expect(env.Client.Create(t.Context(), cr)).To(Succeed())
	}
	get := func(g Gomega, name string) *pkiv1alpha1.CertificateRequest {
		cr := &pkiv1alpha1.CertificateRequest{}
		g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, cr)).To(Succeed())
		return cr
	}
	testenv.Eventually(g, func(g Gomega) {
		cr := get(g, "nokey")
		g.Expect(meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.InvalidRequestCondition)).To(HaveField("Reason", pkiv1alpha1.InvalidRequestReason))
		g.Expect(cr.Status.FailureTime).NotTo(BeNil())
		testenv.ExpectKstatus(t.Context(), g, env.Client, cr, kstatus.FailedStatus, pkiv1alpha1.InvalidRequestReason)
		cr = get(g, "noissuer")
		g.Expect(meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.PendingReason))
		testenv.ExpectKstatus(t.Context(), g, env.Client, cr, kstatus.InProgressStatus, pkiv1alpha1.PendingReason)
		cr = get(g, "badkey")
		g.Expect(meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.FailedReason))
		testenv.ExpectKstatus(t.Context(), g, env.Client, cr, kstatus.FailedStatus, pkiv1alpha1.FailedReason)
		g.Expect(meta.FindStatusCondition(get(g, "denied").Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.PendingReason))
		testenv.ExpectKstatus(t.Context(), g, env.Client, &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "selfsigned"}}, kstatus.CurrentStatus, "")
	}).Should(Succeed())
	// An approver denies the pending request: it is final, and kstatus
	// reads it Failed with the approver's reason.
	g.Eventually(func() error {
		cr := get(g, "denied")
		meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: pkiv1alpha1.DeniedCondition, Status: metav1.ConditionTrue,
			Reason: "PolicyDenied", Message: "denied by the test's approver"})
		return env.Client.Status().Update(t.Context(), cr)
	}).Should(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		testenv.ExpectKstatus(t.Context(), g, env.Client, get(g, "denied"), kstatus.FailedStatus, "PolicyDenied")
	}).Should(Succeed())
}

// TestACMERegistrationFailed: an ACME server that cannot be reached is named
// on the Issuer.
func TestACMERegistrationFailed(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme"}, Spec: pkiv1alpha1.IssuerSpec{ACME: &pkiv1alpha1.ACMEIssuer{
		// Allowed by the suite; nothing listens there.
		Server: pebbletest.DirectoryURL(unreachableDirPort), PrivateKeySecretRef: pkiv1alpha1.SecretKeySelector{Name: "acme-account"}}}}
	g.Expect(env.Client.Create(t.Context(), iss)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(iss), iss)).To(Succeed())
		cond := meta.FindStatusCondition(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(pkiv1alpha1.ACMERegistrationFailedReason))
		g.Expect(cond.Message).To(ContainSubstring("connection refused"))
	}).Should(Succeed())
	// The account key Secret was made, labelled as Converge's.
	s := getSecret(t, ns, "acme-account")
	b, _ := pem.Decode(s.Data[corev1.TLSPrivateKeyKey])
	g.Expect(b).NotTo(BeNil())
	_, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
}

// TestShardedCertificate: a Certificate and its Issuer labelled for a shard
// are issued by that shard's manager, and the request it creates carries
// the shard label (otherwise that shard's CertificateRequest controller
// never sees it and the Certificate waits forever).
func TestShardedCertificate(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	const shard = "pki-shard"
	stop := env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"issuer", "certificaterequest", "certificate"}
		o.ShardKey = shard
	})
	defer func() { _ = stop() }()
	ns := env.NewNamespace(t)
	labels := map[string]string{setup.ShardLabel: shard}
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "selfsigned", Labels: labels},
		Spec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}}
	g.Expect(env.Client.Create(t.Context(), iss)).To(Succeed())
	c := newCert(ns, "sharded", "selfsigned", "sharded.example.com")
	c.Labels = labels
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	waitCert(t, g, ns, "sharded", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	var cr pkiv1alpha1.CertificateRequest
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "sharded-1"}, &cr)).To(Succeed())
	g.Expect(cr.Labels).To(HaveKeyWithValue(setup.ShardLabel, shard))
}
