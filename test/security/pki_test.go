package security

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/acme"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// caSecret makes a valid CA key pair Secret.
func caSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	key, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, _ := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{CommonName: "victim CA"}, key)
	csr, _ := pki.ParseCSR(csrPEM)
	tmpl, _ := pki.Template(csr, time.Hour, nil, true, time.Now())
	crt, err := pki.Sign(tmpl, nil, key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.EncodeKey(key, pkiv1alpha1.PKCS8)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: keyPEM}}
}

// waitIssuerReason waits until the Issuer's Ready condition has the reason
// (an issuer can show another reason first, before its cache has the CA
// Secret) and returns it.
func waitIssuerReason(t *testing.T, g Gomega, c client.Client, iss *pkiv1alpha1.Issuer, want string) string {
	t.Helper()
	var reason string
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(iss), iss)).To(Succeed())
		c := meta.FindStatusCondition(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		reason = c.Reason
		g.Expect(reason).To(Equal(want), "Ready: %s: %s", c.Reason, c.Message)
	}).Should(Succeed())
	return reason
}

// TestPKIAnotherNamespacesCA: a tenant's ca Issuer naming a CA Secret that
// lives only in another tenant's namespace cannot sign with it, and a
// Certificate naming an Issuer of another namespace finds none. Nothing is
// issued.
func TestPKIAnotherNamespacesCA(t *testing.T) {
	victim, attacker := newTenant(t), newTenant(t)
	g := NewWithT(t)
	g.Expect(victim.Client.Create(t.Context(), caSecret(t, victim.NS, "victim-ca"))).To(Succeed())
	victimIssuer := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "victim"}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "victim-ca"}}}
	g.Expect(victim.Client.Create(t.Context(), victimIssuer)).To(Succeed())
	g.Expect(waitIssuerReason(t, g, victim.Client, victimIssuer, pkiv1alpha1.IssuerReadyReason)).To(Equal(pkiv1alpha1.IssuerReadyReason), "control: the victim's issuer works")

	// The attacker names the victim's Secret from its own namespace.
	steal := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "steal"}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "victim-ca"}}}
	g.Expect(attacker.Client.Create(t.Context(), steal)).To(Succeed())
	g.Expect(waitIssuerReason(t, g, attacker.Client, steal, pkiv1alpha1.CASecretInvalidReason)).To(Equal(pkiv1alpha1.CASecretInvalidReason))
	g.Consistently(func(g Gomega) {
		g.Expect(attacker.Client.Get(t.Context(), client.ObjectKeyFromObject(steal), steal)).To(Succeed())
		g.Expect(meta.FindStatusCondition(steal.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.CASecretInvalidReason))
	}).WithTimeout(time.Second).Should(Succeed(), "and it stays refused")
	g.Expect(meta.FindStatusCondition(steal.Status.Conditions, pkiv1alpha1.ReadyCondition).Message).To(ContainSubstring(attacker.NS + "/victim-ca not found"))

	// The attacker names the victim's Issuer.
	for _, name := range []string{"steal", "victim"} {
		c := &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "via-" + name}, Spec: pkiv1alpha1.CertificateSpec{
			SecretName: "via-" + name, DNSNames: []string{"bank.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: name}}}
		g.Expect(attacker.Client.Create(t.Context(), c)).To(Succeed())
	}
	want := map[string]string{"via-steal": pkiv1alpha1.IssuerNotReadyReason, "via-victim": pkiv1alpha1.IssuerNotFoundReason}
	for name, reason := range want {
		testenv.Eventually(g, func(g Gomega) {
			var c pkiv1alpha1.Certificate
			g.Expect(attacker.Client.Get(t.Context(), client.ObjectKey{Namespace: attacker.NS, Name: name}, &c)).To(Succeed())
			g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", reason))
		}).Should(Succeed())
	}
	var secrets corev1.SecretList
	g.Expect(attacker.Client.List(t.Context(), &secrets, client.InNamespace(attacker.NS))).To(Succeed())
	for _, s := range secrets.Items {
		g.Expect(s.Data).NotTo(HaveKey(corev1.TLSCertKey), "no certificate was issued in the attacker's namespace: %s", s.Name)
	}
	g.Expect(victim.Client.List(t.Context(), &secrets, client.InNamespace(victim.NS))).To(Succeed())
	g.Expect(secrets.Items).To(ContainElement(HaveField("ObjectMeta.Name", "victim-ca")))
	for _, s := range secrets.Items {
		g.Expect(s.Name).NotTo(HavePrefix("via-"), "nothing was written in the victim's namespace")
	}
}

// TestPKIForeignSecretNeverOverwritten: a tenant's Certificate naming an
// existing Secret it did not write (say, another app's credentials) leaves
// it intact and says SecretNotOwned.
func TestPKIForeignSecretNeverOverwritten(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ns := tn.NS
	g.Expect(tn.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-credentials"},
		Data: map[string][]byte{"password": []byte("s3cret")}})).To(Succeed())
	g.Expect(tn.Client.Create(t.Context(), &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ss"},
		Spec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}})).To(Succeed())
	g.Expect(tn.Client.Create(t.Context(), &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clobber"},
		Spec: pkiv1alpha1.CertificateSpec{SecretName: "db-credentials", DNSNames: []string{"x.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ss"}}})).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		var c pkiv1alpha1.Certificate
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "clobber"}, &c)).To(Succeed())
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.SecretNotOwnedReason))
	}).Should(Succeed())
	g.Consistently(func(g Gomega) {
		var s corev1.Secret
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "db-credentials"}, &s)).To(Succeed())
		g.Expect(s.Data).To(Equal(map[string][]byte{"password": []byte("s3cret")}))
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

// acmeTrap is a loopback HTTP server playing ACME directories for the
// suite; it counts the requests per path. The suite's manager allows the
// directories under AllowedPrefix (suite_test.go), as an admin allowing a
// private CA would.
type acmeTrap struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

// trap is the suite's acmeTrap.
var trap *acmeTrap

// hugeErrorBody is what the trap's huge directory answers, with status 400:
// 256 MiB of HTML, control characters and invalid UTF-8.
const hugeErrorBody = 256 << 20

func startACMETrap() *acmeTrap {
	a := &acmeTrap{hits: map[string]int{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.hits[r.URL.Path]++
		a.mu.Unlock()
		if !strings.HasSuffix(r.URL.Path, "/huge/dir") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadRequest)
		chunk := []byte(strings.Repeat("<script>alert(1)</script>\x00\x1b[31m\xff\xfe\n", 1<<12))
		for sent := 0; sent < hugeErrorBody; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return // the client stopped reading
			}
		}
	}))
	return a
}

// AllowedPrefix is the URL prefix the suite's manager allows.
func (a *acmeTrap) AllowedPrefix() string { return a.srv.URL + "/allowed/" }

// URL is the trap's URL of path.
func (a *acmeTrap) URL(path string) string { return a.srv.URL + path }

// Hits is how many requests path received.
func (a *acmeTrap) Hits(path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hits[path]
}

// Close stops the trap.
func (a *acmeTrap) Close() { a.srv.Close() }

// acmeIssuer is an acme Issuer of server.
func acmeIssuer(ns, name, server string) *pkiv1alpha1.Issuer {
	return &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: pkiv1alpha1.IssuerSpec{ACME: &pkiv1alpha1.ACMEIssuer{
		Server: server, Email: "ops@example.com", PrivateKeySecretRef: pkiv1alpha1.SecretKeySelector{Name: name + "-account"},
		Solvers: []pkiv1alpha1.ACMESolver{{HTTP01: &pkiv1alpha1.ACMEHTTP01Solver{}}}}}}
}

// TestPKIACMEDirectoryNotAllowed: a tenant's Issuer naming an ACME server
// the admin did not allow (a loopback service here: the SSRF of issue 32)
// is refused at admission naming spec.acme.server, and the service gets no
// request. One stored before the admin narrowed the list (a manager whose
// list no longer has it) is Stalled, ACMEServerNotAllowed, again without a
// request nor an account key written.
func TestPKIACMEDirectoryNotAllowed(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	var internalHits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		internalHits.Add(1)
		_, _ = w.Write([]byte(`{"newAccount": "secret internal data"}`))
	}))
	t.Cleanup(internal.Close)

	for _, server := range []string{
		internal.URL + "/dir",
		trap.URL("/allowed/../internal/dir"), // under the prefix as a string only
		trap.URL("/allowed/%2e%2e/internal/dir"),
		"http://user@" + strings.TrimPrefix(trap.URL("/allowed/dir"), "http://"),
	} {
		err := tn.Client.Create(t.Context(), acmeIssuer(tn.NS, "ssrf", server))
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", server, err)
		g.Expect(err.Error()).To(ContainSubstring("spec.acme.server"))
		g.Expect(err.Error()).To(ContainSubstring("--acme-allowed-directories"))
	}

	// The admin narrows the list: a manager (the shard this Issuer is
	// labelled for) that allows Let's Encrypt only.
	const shard = "pki-narrowed"
	stop := env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"issuer"}
		o.ShardKey = shard
		o.PKI.ACMEAllowedDirectories = acme.DefaultAllowedDirectories
	})
	t.Cleanup(func() { _ = stop() })
	path := "/allowed/narrowed/dir"
	iss := acmeIssuer(tn.NS, "narrowed", trap.URL(path))
	iss.Labels = map[string]string{setup.ShardLabel: shard}
	g.Expect(tn.Client.Create(t.Context(), iss)).To(Succeed(), "allowed by the webhook of the suite's manager")
	waitIssuerReason(t, g, tn.Client, iss, pkiv1alpha1.ACMEServerNotAllowedReason)
	stalled := meta.FindStatusCondition(iss.Status.Conditions, pkiv1alpha1.StalledCondition)
	g.Expect(stalled).NotTo(BeNil())
	g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(stalled.Reason).To(Equal(pkiv1alpha1.ACMEServerNotAllowedReason))
	g.Expect(stalled.Message).To(ContainSubstring("spec.acme.server"))
	g.Expect(stalled.Message).To(ContainSubstring("no request was made"))
	testenv.ExpectKstatus(t.Context(), g, tn.Client, iss, kstatus.FailedStatus, pkiv1alpha1.ACMEServerNotAllowedReason)
	g.Consistently(func(g Gomega) {
		g.Expect(trap.Hits(path)).To(BeZero())
	}).WithTimeout(2 * time.Second).Should(Succeed())
	var secrets corev1.SecretList
	g.Expect(tn.Client.List(t.Context(), &secrets, client.InNamespace(tn.NS))).To(Succeed())
	g.Expect(secrets.Items).NotTo(ContainElement(HaveField("ObjectMeta.Name", "narrowed-account")), "no account key was written")
	g.Expect(internalHits.Load()).To(BeZero(), "the internal service got no request")
}

// TestPKIACMEHugeErrorBodyBounded: an allowed ACME directory answering
// with a 256 MiB error body of HTML, control characters and invalid UTF-8
// (issue 32 measured +6.5 GiB for 384 MiB): the manager reads at most
// acme.MaxResponseBody of it, the Issuer says ACMERegistrationFailed with a
// message of at most 1 KiB of valid one-line text, and the manager's peak
// memory (it runs in this process) barely moves.
func TestPKIACMEHugeErrorBodyBounded(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	path := "/allowed/" + tn.NS + "/huge/dir"
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset the peak
	before := vmHWM(t)
	iss := acmeIssuer(tn.NS, "huge", trap.URL(path))
	g.Expect(tn.Client.Create(t.Context(), iss)).To(Succeed())
	waitIssuerReason(t, g, tn.Client, iss, pkiv1alpha1.ACMERegistrationFailedReason)
	msg := meta.FindStatusCondition(iss.Status.Conditions, pkiv1alpha1.ReadyCondition).Message
	g.Expect(trap.Hits(path)).To(BeNumerically(">", 0), "control: the manager did talk to the allowed directory")
	g.Expect(len(msg)).To(BeNumerically("<=", acme.MaxStatusText))
	g.Expect(utf8.ValidString(msg)).To(BeTrue())
	g.Expect(strings.ContainsAny(msg, "\n\x00\x1b")).To(BeFalse(), "one line, no control characters: %q", msg)
	g.Expect(msg).To(ContainSubstring("<script>"), "the server's words, as text")
	after := vmHWM(t)
	t.Logf("peak RSS %d MiB before, %d MiB after", before>>20, after>>20)
	g.Expect(after-before).To(BeNumerically("<", int64(64<<20)), "the error body grew the manager's peak memory by %d MiB", (after-before)>>20)
}

// TestPKIRenewalFloor: the renewal storm of issue 32 (duration 1h,
// renewBefore 59m59s: 31 issuances a minute). The tenant's storm spec is
// refused naming spec.renewBefore (and renewBeforePercentage 99 naming its
// field); a spec the webhook admits but that the issued certificate makes a
// storm — the tenant's CA expires in an hour, so a 3h Certificate gets a
// leaf of about an hour, and renewBefore 55m would renew it after 5 minutes
// — is renewed no earlier than a third of the leaf's lifetime: the
// renewal time recorded in the status says so, as do the Ready message and
// a RenewalClamped Event; one issuance only.
func TestPKIRenewalFloor(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	storm := &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "storm"}, Spec: pkiv1alpha1.CertificateSpec{
		SecretName: "storm", DNSNames: []string{"storm.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ca"},
		Duration: &metav1.Duration{Duration: time.Hour}, RenewBefore: &metav1.Duration{Duration: time.Hour - time.Second}}}
	err := tn.Client.Create(t.Context(), storm)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.renewBefore"))
	storm.Spec.RenewBefore, storm.Spec.RenewBeforePercentage = nil, ptr.To[int32](99)
	err = tn.Client.Create(t.Context(), storm)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.renewBeforePercentage"))

	g.Expect(tn.Client.Create(t.Context(), caSecret(t, tn.NS, "short-ca"))).To(Succeed()) // valid for 1h
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "ca"}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "short-ca"}}}
	g.Expect(tn.Client.Create(t.Context(), iss)).To(Succeed())
	renewBefore := 55 * time.Minute
	c := &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "clamped"}, Spec: pkiv1alpha1.CertificateSpec{
		SecretName: "clamped", DNSNames: []string{"clamped.example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ca"},
		Duration: &metav1.Duration{Duration: 3 * time.Hour}, RenewBefore: &metav1.Duration{Duration: renewBefore}}}
	g.Expect(tn.Client.Create(t.Context(), c)).To(Succeed(), "admitted: 55m is under 2/3 of 3h")
	var ready *metav1.Condition
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		ready = meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "%s: %s", ready.Reason, ready.Message)
		g.Expect(c.Status.RenewalTime).NotTo(BeNil())
	}).Should(Succeed())
	nb, na, rt := c.Status.NotBefore.Time, c.Status.NotAfter.Time, c.Status.RenewalTime.Time
	life := na.Sub(nb)
	g.Expect(life).To(BeNumerically("<", 2*time.Hour), "control: the leaf ends with its CA, shorter than spec.duration")
	g.Expect(life).To(BeNumerically(">", renewBefore), "control: renewBefore applies to this leaf")
	// Status times are in seconds: a second of slack.
	g.Expect(rt).To(BeTemporally(">=", nb.Add(life/3).Add(-time.Second)), "renewal at %s, before a third of the lifetime %s..%s", rt, nb, na)
	g.Expect(rt).To(BeTemporally(">", na.Add(-renewBefore).Add(time.Minute)), "not renewBefore's time")
	g.Expect(ready.Reason).To(Equal(pkiv1alpha1.CertificateReadyReason))
	g.Expect(ready.Message).To(ContainSubstring("renew before a third of its lifetime"))
	g.Expect(ready.Message).To(ContainSubstring(rt.UTC().Format(time.RFC3339)))
	testenv.Eventually(g, func(g Gomega) {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(t.Context(), &evs, client.InNamespace(tn.NS))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(HaveField("Reason", "RenewalClamped"), HaveField("Regarding.Name", "clamped"))))
	}).Should(Succeed())
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(tn.Client.List(t.Context(), &crs, client.InNamespace(tn.NS))).To(Succeed())
	g.Expect(crs.Items).To(HaveLen(1), "one issuance")
}

// TestPKIKeySizeBounded: key generation runs in the manager, and an RSA key
// of 8192 bits costs seconds of CPU. The tenant's 8192 is refused naming
// spec.privateKey.size; a 4096 stored before the admin lowered the limit (a
// manager, the shard this Certificate is labelled for, allowing 2048) is
// Stalled, KeySizeNotAllowed, with no key, no request and no Secret made;
// another tenant's Certificate on the same manager is issued.
func TestPKIKeySizeBounded(t *testing.T) {
	tn, victim := newTenant(t), newTenant(t)
	g := NewWithT(t)
	cert := func(ns, name string, size int32, labels map[string]string) *pkiv1alpha1.Certificate {
		return &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: pkiv1alpha1.CertificateSpec{
			SecretName: name, DNSNames: []string{name + ".example.com"}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ss"},
			PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.RSAKeyAlgorithm, Size: size}}}
	}
	err := tn.Client.Create(t.Context(), cert(tn.NS, "huge-key", 8192, nil))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.privateKey.size"))
	g.Expect(err.Error()).To(ContainSubstring("--max-rsa-key-size"))

	const shard = "pki-small-keys"
	labels := map[string]string{setup.ShardLabel: shard}
	stop := env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"issuer", "certificaterequest", "certificate"}
		o.ShardKey = shard
		o.PKI.MaxRSAKeySize = 2048
	})
	t.Cleanup(func() { _ = stop() })
	for _, tt := range []*tenant{tn, victim} {
		g.Expect(tt.Client.Create(t.Context(), &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: tt.NS, Name: "ss", Labels: labels},
			Spec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}})).To(Succeed())
	}
	c := cert(tn.NS, "big-key", 4096, labels)
	g.Expect(tn.Client.Create(t.Context(), c)).To(Succeed(), "4096 is within the suite's (the chart's) limit")
	ok := cert(victim.NS, "small-key", 2048, labels)
	g.Expect(victim.Client.Create(t.Context(), ok)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		stalled := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil())
		g.Expect(stalled.Reason).To(Equal(pkiv1alpha1.KeySizeNotAllowedReason))
		g.Expect(stalled.Message).To(ContainSubstring("spec.privateKey.size"))
		g.Expect(meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(HaveField("Reason", pkiv1alpha1.KeySizeNotAllowedReason))
	}).Should(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(victim.Client.Get(t.Context(), client.ObjectKeyFromObject(ok), ok)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(ok.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue(), "%v", ok.Status.Conditions)
	}).Should(Succeed(), "the other tenant's Certificate is issued")
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(tn.Client.List(t.Context(), &crs, client.InNamespace(tn.NS))).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty(), "nothing was requested")
	var secrets corev1.SecretList
	g.Expect(tn.Client.List(t.Context(), &secrets, client.InNamespace(tn.NS))).To(Succeed())
	for _, s := range secrets.Items {
		g.Expect(s.Name).NotTo(HavePrefix("big-key"), "no key nor certificate was written")
	}
}
