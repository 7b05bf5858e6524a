package cainjector_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/certcli"
	"github.com/converge-dev/converge/internal/controller/cainjector"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/webhookcert"
)

// The phases of a CA rotation, as the admission loop counts its calls.
const (
	phaseOldCA      = iota // bundle: old CA; served: the leaf from the old CA
	phaseOverlapOld        // the CA rotated; served: still the old leaf
	phaseOverlapNew        // served: the leaf reissued from the new CA
	phaseNewCA             // bundle: the new CA only
	phases
)

var phaseNames = [phases]string{"old CA", "CA rotated, old leaf served", "new leaf served", "new CA only"}

// callsPerPhase is how many admission calls must complete in each phase once
// its state is observed, before the test moves on.
const callsPerPhase = 15

// rotationWebhookYAML is a ValidatingWebhookConfiguration with one webhook on
// ConfigMaps carrying a label, in one namespace only: %[1]s name, %[2]s
// inject-ca-from, %[3]s URL, %[4]s namespace.
const rotationWebhookYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: %[1]s
  annotations:
    pki.converge.dev/inject-ca-from: %[2]s
webhooks:
- name: rotation.inject.test.converge.dev
  clientConfig: {url: "%[3]s"}
  rules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["configmaps"]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[4]s}}
  objectSelector: {matchLabels: {inject.test.converge.dev/rotation: "yes"}}
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
`

// webhookServer is an HTTPS admission webhook on loopback that allows
// everything, counts the reviews it answers and records the leaf it presents
// in every handshake.
type webhookServer struct {
	url     string
	reviews atomic.Int64
	// handshakeErrors counts the handshakes the client refused (the
	// server's side of a TLS failure).
	handshakeErrors atomic.Int64

	mu     sync.Mutex
	served []*x509.Certificate // the leaf of each handshake, in order
}

// startWebhookServer serves with the key pair of the Secret ns/name and
// reloads it when the Secret changes. The reloading is Converge's own: the
// webhookcert.Manager the manager's webhook server runs with
// --webhook-cert-secret when self-management is off (cert-manager or a
// Certificate owns the Secret). It watches the Secret through the API server
// and swaps the pair served by tls.Config.GetCertificate without restarting
// the listener, as a real workload reading its Secret does. Keep-alives are
// off, so every admission call is a new handshake: the API server checks the
// certificate served at that moment against the bundle it holds at that
// moment (a reused connection would hide a bundle that no longer trusts it).
func startWebhookServer(t *testing.T, g Gomega, ns, name string) *webhookServer {
	t.Helper()
	m := &webhookcert.Manager{Store: webhookcert.NewSecretStore(env.Clientset, ns, name), Hosts: []string{"127.0.0.1"}}
	testenv.Eventually(g, func() error { return m.Sync(t.Context()) }).Should(Succeed())
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.Start(ctx) })

	s := &webhookServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		s.reviews.Add(1)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := m.GetCertificate(hello)
			if err == nil {
				s.mu.Lock()
				s.served = append(s.served, c.Leaf)
				s.mu.Unlock()
			}
			return c, err
		},
	}}
	srv.ErrorLog = log.New(writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), "TLS handshake error") {
			s.handshakeErrors.Add(1)
		}
		return len(p), nil
	}), "", 0)
	srv.SetKeepAlivesEnabled(false)
	wg.Go(func() { _ = srv.ServeTLS(ln, "", "") })
	t.Cleanup(func() {
		_ = srv.Close()
		cancel()
		wg.Wait()
	})
	s.url = "https://" + ln.Addr().String() + "/validate"
	return s
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// servedLeaves returns the leaves served so far, each once, in the order
// they were first served, and the last one.
func (s *webhookServer) servedLeaves() (distinct []*x509.Certificate, last *x509.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.served {
		if !contains(distinct, c) {
			distinct = append(distinct, c)
		}
	}
	if n := len(s.served); n > 0 {
		last = s.served[n-1]
	}
	return distinct, last
}

func contains(certs []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range certs {
		if x.Equal(c) {
			return true
		}
	}
	return false
}

// admissionLoop creates and updates labelled ConfigMaps through the API
// server (so through the webhook) until stopped, counting per phase the calls
// that completed and keeping the errors.
type admissionLoop struct {
	phase    atomic.Int32
	done     [phases]atomic.Int64
	failures [phases]atomic.Int64

	mu     sync.Mutex
	errors []string
}

func (l *admissionLoop) run(ctx context.Context, ns string) {
	for i := 0; ctx.Err() == nil; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("call-%d", i),
			Labels: map[string]string{"inject.test.converge.dev/rotation": "yes"}}, Data: map[string]string{"n": "0"}}
		if l.call(ctx, func() error { return env.Client.Create(ctx, cm) }) {
			cm.Data["n"] = "1"
			l.call(ctx, func() error { return env.Client.Update(ctx, cm) })
		}
		time.Sleep(10 * time.Millisecond) // dense enough for windows of a second, light on the machine
	}
}

// call makes one call and reports whether it succeeded.
func (l *admissionLoop) call(ctx context.Context, f func() error) bool {
	p := l.phase.Load()
	err := f()
	if ctx.Err() != nil {
		return false // stopped mid-call: not a result
	}
	l.done[p].Add(1)
	if err != nil {
		l.failures[p].Add(1)
		l.mu.Lock()
		l.errors = append(l.errors, fmt.Sprintf("phase %q: %v", phaseNames[p], err))
		l.mu.Unlock()
	}
	return err == nil
}

// enter moves the loop to phase p (if not yet) and waits for callsPerPhase
// more calls to complete in it.
func (l *admissionLoop) enter(g Gomega, p int) {
	l.phase.Store(int32(p))
	start := l.done[p].Load()
	testenv.Eventually(g, func() int64 { return l.done[p].Load() }).Should(BeNumerically(">=", start+callsPerPhase), "calls in phase %q", phaseNames[p])
}

// bundleRecorder records every distinct caBundle of an object, in order.
type bundleRecorder struct {
	mu      sync.Mutex
	bundles [][]*x509.Certificate
}

func (b *bundleRecorder) run(ctx context.Context, u *unstructured.Unstructured) {
	for ctx.Err() == nil {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), got); err == nil {
			ws, _, _ := unstructured.NestedSlice(got.Object, "webhooks")
			if len(ws) == 1 {
				s, _, _ := unstructured.NestedString(ws[0].(map[string]any), "clientConfig", "caBundle")
				b.add(s)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *bundleRecorder) add(enc string) {
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(raw) == 0 {
		return
	}
	cs := certs(raw)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.bundles); n == 0 || !equalCerts(b.bundles[n-1], cs) {
		b.bundles = append(b.bundles, cs)
	}
}

func (b *bundleRecorder) last() []*x509.Certificate {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bundles) == 0 {
		return nil
	}
	return b.bundles[len(b.bundles)-1]
}

func (b *bundleRecorder) history() [][]*x509.Certificate {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]*x509.Certificate(nil), b.bundles...)
}

func equalCerts(a, b []*x509.Certificate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// leafOf reads the serving certificate from a Secret.
func leafOf(t *testing.T, g Gomega, ns, name string) *x509.Certificate {
	t.Helper()
	s := &corev1.Secret{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	chain := certs(s.Data[corev1.TLSCertKey])
	g.Expect(chain).NotTo(BeEmpty())
	return chain[0]
}

// TestRotationThroughALiveWebhook: the API server calls a real webhook
// server (failurePolicy Fail) whose caBundle is injected from a CA
// Certificate, while ConfigMaps are created and updated through it without
// pause. The CA rotates (new key); the server keeps serving its leaf from the
// old CA, past the end of the first overlap (the leaf is not due for
// renewal, and the injector holds the old CA while it is issued); the leaf is
// renewed and the server reloads one from the new CA from its Secret; the
// overlap ends. Not one admission call fails: the bundle went old -> new +
// old -> new, and the server presented the old leaf, then the new one. The
// order is the one a real rotation produces and the dangerous one: the
// bundle changes first, the leaf later (at its renewal), so calls are made
// while the bundle holds the new CA and the server still presents the old
// leaf.
//
// It runs twice: with inject-ca-from naming the CA Certificate, and naming
// the serving Certificate itself (whose ca.crt changes only when it is
// reissued, in the same write as its certificate: the injector adds its CA
// Issuer's current CA, so the new CA is trusted before the leaf moves to
// it). Only the first needs the overlap held past its end: in the second the
// old CA is the serving Secret's own ca.crt until the reissue.
func TestRotationThroughALiveWebhook(t *testing.T) {
	testenv.Need(t, env)
	t.Run("inject-ca-from the CA", func(t *testing.T) { rotateThroughALiveWebhook(t, "ca", false) })
	t.Run("inject-ca-from the serving Certificate", func(t *testing.T) { rotateThroughALiveWebhook(t, "serving", false) })
	t.Run("inject-ca-from the serving Certificate of a ClusterIssuer", func(t *testing.T) { rotateThroughALiveWebhook(t, "serving", true) })
}

// rotateThroughALiveWebhook runs the test with inject-ca-from naming
// injectFrom ("ca" or "serving"), the serving Certificate issued by a CA
// Issuer or, with cluster, a CA ClusterIssuer whose CA Certificate lives in
// the cluster resource namespace.
func rotateThroughALiveWebhook(t *testing.T, injectFrom string, cluster bool) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)

	// A CA issuer backed by a CA Certificate, and the serving Certificate
	// for 127.0.0.1, the address the API server calls.
	caNS, caName, issuer := ns, "ca", pkiv1alpha1.IssuerReference{Name: "ca-issuer"}
	if cluster {
		caNS, caName, issuer = clusterResourceNamespace, ns, pkiv1alpha1.IssuerReference{Name: ns, Kind: "ClusterIssuer"}
		// The serving address is granted by the policy: a ClusterIssuer
		// signs no IP address for a namespace without one.
		iss := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: caName}},
			Policy: &pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"127.0.0.1/32"}}}}
		g.Expect(env.Client.Create(ctx, iss)).To(Succeed())
		// No CA Secret yet: the issuer waits for it, and kstatus reads it
		// InProgress (Current once the CA is issued, below).
		testenv.Eventually(g, func(g Gomega) {
			testenv.ExpectKstatus(ctx, g, env.Client, iss, kstatus.InProgressStatus, pkiv1alpha1.CASecretInvalidReason)
		}).Should(Succeed())
		t.Cleanup(func() {
			// Not in the test's namespace: deleted one by one.
			bg := context.WithoutCancel(ctx)
			for _, o := range []client.Object{iss,
				&pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: caNS, Name: caName}},
				&pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: caNS, Name: caName + "-root"}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: caNS, Name: caName}}} {
				if err := env.Client.Delete(bg, o); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting %T %s: %v", o, o.GetName(), err)
				}
			}
		})
	} else {
		g.Expect(env.Client.Create(ctx, &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca-issuer"},
			Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: caName}}})).To(Succeed())
	}
	caCertificate(t, caNS, caName)
	g.Expect(env.Client.Create(ctx, &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "serving"},
		Spec: pkiv1alpha1.CertificateSpec{SecretName: "serving", IPAddresses: []string{"127.0.0.1"},
			IssuerRef:  issuer,
			PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm}}})).To(Succeed())
	ca1PEM := caOf(t, g, caNS, caName, nil)
	ca1 := certs(ca1PEM)
	g.Expect(ca1).To(HaveLen(1))
	if cluster {
		testenv.Eventually(g, func(g Gomega) {
			testenv.ExpectKstatus(ctx, g, env.Client, &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: ns}}, kstatus.CurrentStatus, "")
		}).Should(Succeed())
	}
	var ca2 []*x509.Certificate // the CA after the rotation
	var leaf1 *x509.Certificate
	testenv.Eventually(g, func(g Gomega) {
		leaf1 = leafOf(t, g, ns, "serving")
		g.Expect(leaf1.CheckSignatureFrom(ca1[0])).To(Succeed())
	}).Should(Succeed())

	srv := startWebhookServer(t, g, ns, "serving")
	ref := ns + "/" + injectFrom
	if injectFrom == "ca" {
		ref = caNS + "/" + caName
	}
	vwc := create(t, fmt.Sprintf(rotationWebhookYAML, "%[1]s", "%[2]s", srv.url, ns), "rotation-"+ns, ref)
	var bundles bundleRecorder
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() }) // also on failure: nothing outlives the test
	wg.Go(func() { bundles.run(loopCtx, vwc) })
	names := func(cs []*x509.Certificate) []string {
		var out []string
		for _, c := range cs {
			switch {
			case c.Equal(ca1[0]):
				out = append(out, "old CA")
			case c.Equal(ca2[0]):
				out = append(out, "new CA")
			default:
				out = append(out, "CA "+c.SerialNumber.String())
			}
		}
		return out
	}
	injectedNow := func() []string { return names(bundles.last()) }
	testenv.Eventually(g, injectedNow).Should(Equal([]string{"old CA"}), "the CA injected")
	// The API server's informer sees the injected bundle a moment after we
	// do: the counted calls start once one call went through.
	testenv.Eventually(g, func() error {
		return env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "warm-up-",
			Labels: map[string]string{"inject.test.converge.dev/rotation": "yes"}}})
	}).Should(Succeed())
	g.Expect(srv.reviews.Load()).To(BeNumerically(">", 0), "the warm-up call went through the webhook")

	var loop admissionLoop
	wg.Go(func() { loop.run(loopCtx, ns) })
	t.Cleanup(func() {
		if t.Failed() { // say what the admission calls saw, wherever the test stopped
			loop.mu.Lock()
			defer loop.mu.Unlock()
			t.Logf("%d admission calls failed; the first: %v", len(loop.errors), loop.errors[:min(3, len(loop.errors))])
		}
	})
	loop.enter(g, phaseOldCA)

	// Rotate the CA: its Secret is deleted and reissued with a new key. The
	// serving Certificate is not due for renewal, so the server goes on
	// presenting the leaf from the old CA while the bundle changes.
	loop.phase.Store(phaseOverlapOld)
	g.Expect(env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: caNS, Name: caName}})).To(Succeed())
	ca2 = certs(caOf(t, g, caNS, caName, ca1PEM))
	g.Expect(ca2).To(HaveLen(1))
	g.Expect(ca2[0].PublicKey).NotTo(Equal(ca1[0].PublicKey), "a new key")
	testenv.Eventually(g, injectedNow).Should(ContainElement("new CA"), "the new CA injected")
	loop.enter(g, phaseOverlapOld)

	// The overlap ends while the serving Secret still holds the leaf from
	// the old CA (it is not due for renewal): the old CA stays trusted for
	// another overlap rather than cutting the server off.
	overlapUntil := func(g Gomega) time.Time {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(vwc.GroupVersionKind())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(vwc), got)).To(Succeed())
		g.Expect(got.GetAnnotations()).To(HaveKey(cainjector.OverlapLeavesAnnotation), "the old leaf is seen as issued")
		until, err := time.Parse(time.RFC3339, got.GetAnnotations()[cainjector.OverlapUntilAnnotation])
		g.Expect(err).NotTo(HaveOccurred())
		return until
	}
	if injectFrom == "ca" {
		first := overlapUntil(g)
		testenv.Eventually(g, func(g Gomega) {
			g.Expect(overlapUntil(g)).To(BeTemporally(">", first), "the overlap held past its first end")
		}).Should(Succeed())
		g.Expect(injectedNow()).To(Equal([]string{"new CA", "old CA"}))
		loop.enter(g, phaseOverlapOld)
	}
	_, last := srv.servedLeaves()
	g.Expect(last.Equal(leaf1)).To(BeTrue(), "the old leaf was still served")

	// The leaf is renewed (as at its renewal time, or `converge cert renew`)
	// by the CA Issuer, now signing with the new CA; the server reloads it.
	testenv.Eventually(g, func() error { _, err := certcli.Renew(ctx, env.Client, ns, "serving"); return err }).Should(Succeed())
	var leaf2 *x509.Certificate
	testenv.Eventually(g, func(g Gomega) {
		leaf2 = leafOf(t, g, ns, "serving")
		g.Expect(leaf2.CheckSignatureFrom(ca2[0])).To(Succeed(), "reissued from the new CA")
	}).Should(Succeed())
	testenv.Eventually(g, func() bool { _, last := srv.servedLeaves(); return last.Equal(leaf2) }).Should(BeTrue(), "the new leaf served")
	loop.enter(g, phaseOverlapNew)

	// The overlap ends: only the new CA is trusted.
	testenv.Eventually(g, injectedNow).Should(Equal([]string{"new CA"}), "the old CA dropped after the overlap")
	loop.enter(g, phaseNewCA)
	stop()
	wg.Wait()

	loop.mu.Lock()
	defer loop.mu.Unlock()
	var succeeded int64
	for p := range phases {
		t.Logf("phase %q: %d admission calls, %d failed", phaseNames[p], loop.done[p].Load(), loop.failures[p].Load())
		succeeded += loop.done[p].Load() - loop.failures[p].Load()
	}
	g.Expect(loop.errors).To(BeEmpty(), "no admission call failed across the rotation")
	g.Expect(srv.handshakeErrors.Load()).To(BeZero(), "no handshake refused")
	g.Expect(srv.reviews.Load()).To(BeNumerically(">=", succeeded), "every call went through the webhook")
	served, _ := srv.servedLeaves()
	g.Expect(served).To(HaveLen(2), "the old leaf, then the new one")
	g.Expect(served[0].Equal(leaf1) && served[1].Equal(leaf2)).To(BeTrue(), "the old leaf, then the new one")
	var hist [][]string
	for _, b := range bundles.history() {
		hist = append(hist, names(b))
	}
	g.Expect(hist).To(Equal([][]string{{"old CA"}, {"new CA", "old CA"}, {"new CA"}}), "bundle: old -> new + old -> new")
}
