package certificate_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/certificate"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// apiWrites reads kube-apiserver's apiserver_request_total for the write
// verbs on the pki kinds, Secrets and Events, by "VERB resource[/sub] code".
// It counts every request, also those that changed nothing or conflicted,
// but for the whole API server: only meaningful when the test runs alone.
func apiWrites(t *testing.T) map[string]float64 {
	t.Helper()
	body, err := env.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range fams["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		switch l["verb"] {
		case "GET", "LIST", "WATCH":
			continue
		}
		switch l["resource"] {
		case "certificates", "certificaterequests", "secrets", "events":
		default:
			continue
		}
		k := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			k += "/" + l["subresource"]
		}
		out[k+" "+l["code"]] += m.GetCounter().GetValue()
	}
	return out
}

// write is one change the API server made in the test's namespace, as a
// watch reported it: every write that changed an object (a create, a patch
// or update that changed something, a delete) is one watch event, ordered by
// its resourceVersion (the etcd revision).
type write struct {
	rv   int64
	desc string
}

// recordWrites watches Certificates, CertificateRequests, Secrets and Events
// of ns and returns a function listing the writes seen so far, in order.
func recordWrites(t *testing.T, ns string) func() []write {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var seen []write
	var wg sync.WaitGroup
	for _, l := range []client.ObjectList{&pkiv1alpha1.CertificateList{}, &pkiv1alpha1.CertificateRequestList{}, &corev1.SecretList{}, &eventsv1.EventList{}} {
		w, err := wc.Watch(ctx, l, client.InNamespace(ns))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for ev := range w.ResultChan() {
				if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
					continue
				}
				o, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				rv, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
				mu.Lock()
				seen = append(seen, write{rv: rv, desc: describeWrite(ev.Type, o)})
				mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() []write {
		mu.Lock()
		defer mu.Unlock()
		out := append([]write(nil), seen...)
		sort.Slice(out, func(i, j int) bool { return out[i].rv < out[j].rv })
		return out
	}
}

// describeWrite names a write: verb, kind, name, and what it says.
func describeWrite(t watch.EventType, o client.Object) string {
	verb := map[watch.EventType]string{watch.Added: "create", watch.Modified: "change", watch.Deleted: "delete"}[t]
	var what string
	switch o := o.(type) {
	case *pkiv1alpha1.Certificate:
		what = "Certificate " + o.Name + " " + conds(o.Status.Conditions)
	case *pkiv1alpha1.CertificateRequest:
		what = "CertificateRequest " + o.Name + " " + conds(o.Status.Conditions)
	case *corev1.Secret:
		what = "Secret " + o.Name
	case *eventsv1.Event:
		what = fmt.Sprintf("Event %s by %s on %s %s", o.Reason, o.ReportingController, o.Regarding.Kind, o.Regarding.Name)
	}
	return verb + " " + what
}

func conds(cs []metav1.Condition) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// TestIssuanceWrites counts the API writes of one issuance from a ca
// Issuer, as the watches of the namespace see them (not timing): the
// Certificate the test creates, then the controllers' writes until the
// Certificate is Ready and nothing more happens. A change that adds a write
// per issuance fails here; the list is in docs/certificates.md ("API writes
// per issuance").
func TestIssuanceWrites(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	crt := caIssuer(t, g, ns, "ca")

	writes := recordWrites(t, ns)
	time.Sleep(500 * time.Millisecond) // the watches list the CA Secret first
	start := len(writes())
	before := apiWrites(t)
	c := newCert(ns, "w", "ca", "w.example.com")
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	waitCert(t, g, ns, "w", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	// Done once no write comes for 3s.
	n := -1
	g.Eventually(func() int {
		prev := n
		n = len(writes())
		if n != prev {
			return -1
		}
		return n
	}).WithTimeout(30 * time.Second).WithPolling(3 * time.Second).Should(BeNumerically(">", 0))
	after := apiWrites(t)
	var reqs []string
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			reqs = append(reqs, fmt.Sprintf("%s=%.0f", k, d))
		}
	}
	sort.Strings(reqs)
	t.Logf("API write requests (whole API server, the test's create included): %s", strings.Join(reqs, ", "))
	got := writes()[start:]
	var lines []string
	for i, w := range got {
		lines = append(lines, fmt.Sprintf("%2d rv=%d %s", i, w.rv, w.desc))
	}
	all := strings.Join(lines, "\n")
	t.Logf("writes of one issuance (the first is the test's create):\n%s", all)
	count := func(prefix string) int {
		n := 0
		for _, w := range got {
			if strings.HasPrefix(w.desc, prefix) {
				n++
			}
		}
		return n
	}
	// The certificate controller: the request, the Secret, one status
	// write (Ready, with the revision); no next-key Secret for a ca issuer,
	// no Issuing status while the signer has not answered.
	g.Expect(count("create CertificateRequest w-1")).To(Equal(1), all)
	g.Expect(count("create Secret w-tls")).To(Equal(1), all)
	g.Expect(count("change Certificate w")).To(Equal(1), all)
	g.Expect(count("change Certificate w [Ready=True/CertificateReady]")).To(Equal(1), all)
	// The signer: one status write (Ready with the certificate).
	g.Expect(count("change CertificateRequest w-1")).To(Equal(1), all)
	// Events: the reason the issuance started, Issued on the Certificate
	// and on the request; each once.
	g.Expect(count("create Event")).To(BeNumerically("<=", 3), all)
	g.Expect(count("change Event")).To(BeZero(), all)
	// And nothing else: 1 (the test's create) + 4 + 1 + 3 at most.
	g.Expect(len(got)).To(BeNumerically("<=", 9), all)
	g.Expect(count("create Secret")+count("delete Secret")).To(Equal(1), all)
	g.Expect(getSecretErr(t, ns, "w-next-key")).To(Satisfy(apierrors.IsNotFound))
	verifyServing(t, g, getSecret(t, ns, "w-tls"), crt, "w.example.com")
}

// TestLostKeyRequestIsReplaced plays the manager that crashed (or lost the
// lease) after creating the request of a ca issuance, whose key lived only
// in its memory: the request exists, for a key nobody holds. The next run
// replaces it with a request for a key of its own, and the Secret holds a
// certificate for the key it holds; the revision is still 1 (nothing was
// issued twice).
func TestLostKeyRequestIsReplaced(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	// The Certificate waits for its issuer, so the test writes the lost
	// request first.
	c := newCert(ns, "lost", "ca", "lost.example.com")
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	waitCert(t, g, ns, "lost", pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.IssuerNotFoundReason)
	lostKey, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	g.Expect(err).NotTo(HaveOccurred())
	csrPEM, err := pki.BuildCSR(&c.Spec, lostKey)
	g.Expect(err).NotTo(HaveOccurred())
	lost := &pkiv1alpha1.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost-1",
		Labels:      map[string]string{pkiv1alpha1.CertificateNameLabel: c.Name},
		Annotations: map[string]string{pkiv1alpha1.CertificateNameAnnotation: c.Name, pkiv1alpha1.RevisionAnnotation: "1", certificate.SpecHashAnnotation: pki.SpecHash(&c.Spec)}},
		Spec: pkiv1alpha1.CertificateRequestSpec{Request: csrPEM, IssuerRef: c.Spec.IssuerRef}}
	g.Expect(controllerutil.SetControllerReference(c, lost, env.Client.Scheme())).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), lost)).To(Succeed())

	crt := caIssuer(t, g, ns, "ca")
	c = waitCert(t, g, ns, "lost", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
	g.Expect(*c.Status.Revision).To(BeEquivalentTo(1))
	s := getSecret(t, ns, "lost-tls")
	key, err := pki.ParseKey(s.Data[corev1.TLSPrivateKeyKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pki.PublicKeyHash(key.Public())).NotTo(Equal(pki.PublicKeyHash(lostKey.Public())), "the lost key is not in the Secret")
	var cr pkiv1alpha1.CertificateRequest
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "lost-1"}, &cr)).To(Succeed())
	g.Expect(cr.UID).NotTo(Equal(lost.UID), "the request for the lost key was replaced")
	csr, err := pki.ParseCSR(cr.Spec.Request)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pki.PublicKeyHash(csr.PublicKey)).To(Equal(pki.PublicKeyHash(key.Public())))
	verifyServing(t, g, s, crt, "lost.example.com")
}

// caIssuer creates a CA key pair Secret and a ca Issuer named name, waits
// until the Issuer is Ready and returns the CA certificate (PEM).
func caIssuer(t *testing.T, g Gomega, ns, name string) []byte {
	t.Helper()
	key, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	g.Expect(err).NotTo(HaveOccurred())
	csrPEM, _ := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{CommonName: "test CA " + name}, key)
	csr, _ := pki.ParseCSR(csrPEM)
	tmpl, _ := pki.Template(csr, 24*time.Hour, nil, true, time.Now())
	crt, err := pki.Sign(tmpl, nil, key)
	g.Expect(err).NotTo(HaveOccurred())
	keyPEM, _ := pki.EncodeKey(key, pkiv1alpha1.PKCS8)
	g.Expect(env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: keyPEM}})).To(Succeed())
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: name}}}
	g.Expect(env.Client.Create(t.Context(), iss)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(iss), iss)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(iss.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue())
	}).Should(Succeed())
	return crt
}

// TestSpecChangeSaysNotReadyAtOnce: the status write saved while a new
// Certificate waits for a signer that signs at once is never saved when it
// would leave a wrong Ready=True: after a spec change the Certificate is
// Ready=False (the old Secret no longer matches) before the new
// certificate makes it Ready=True again.
func TestSpecChangeSaysNotReadyAtOnce(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	caIssuer(t, g, ns, "ca")
	c := newCert(ns, "sc", "ca", "sc.example.com")
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	waitCert(t, g, ns, "sc", pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)

	writes := recordWrites(t, ns)
	time.Sleep(500 * time.Millisecond) // the watches list what exists first
	start := len(writes())
	testenv.Eventually(g, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		c.Spec.DNSNames = []string{"sc2.example.com"}
		return env.Client.Update(t.Context(), c)
	}).Should(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(c.Status.Revision).To(HaveValue(BeEquivalentTo(2)))
		g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue())
	}).Should(Succeed())
	var seq []string
	for _, w := range writes()[start:] {
		if strings.HasPrefix(w.desc, "change Certificate sc ") {
			seq = append(seq, w.desc)
		}
	}
	g.Expect(seq).To(ContainElement(ContainSubstring("Ready=False/")), "no Ready=False between the spec change and the new certificate: %v", seq)
	g.Expect(seq[len(seq)-1]).To(ContainSubstring("Ready=True/CertificateReady"))
}
