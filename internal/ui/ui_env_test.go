package ui_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/replicas"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/ui"
)

var env *testenv.Environment

// The PKI controllers run against a real API server; the page is served in
// this process with the identity under test.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"issuer", "clusterissuer", "certificate", "certificaterequest"}
	}}, &env))
}

// serve starts a page for target (KIND/NAME, or "" for the namespace) with
// the identity of cfg, until the test ends; it returns the page's URL.
func serve(t *testing.T, cfg *rest.Config, ns, target string) (*ui.Server, string) {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := ui.New(ui.Options{Config: cfg, Client: c, Namespace: ns, Target: target})
	if err != nil {
		t.Fatal(err)
	}
	ln, url, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serving the page: %v", err)
		}
	})
	return s, url
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test request on loopback
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// chromium finds Debian's chromium-headless-shell: skipped loudly outside CI
// when it is missing, a failure in CI.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CONVERGE_CHROMIUM"), "/usr/bin/chromium-headless-shell", "/usr/lib/chromium/chromium-headless-shell"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium-headless-shell"); err == nil {
		return p
	}
	testenv.NeedPeer(t, t.Name(), "the headless browser is not installed (apt-get install chromium-headless-shell)")
	return ""
}

// caSecret is a CA key pair, as an Issuer's spec.ca.secretName wants it.
func caSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "converge ui test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		}}
}

// within runs a in the browser of bctx for at most d; a failure goes to
// fail (which ends the test with the page's HTML).
func within[T any](bctx context.Context, d time.Duration, fail func(error), a chromedp.Action[T]) T {
	ctx, cancel := context.WithTimeout(bctx, d)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		fail(err)
	}
	return v
}

// TestPageShowsRootCauseAndUpdatesLive drives the page in a real headless
// browser: a Certificate whose CA Issuer's Secret is missing renders as a
// graph with the Secret highlighted as the root cause on the path
// Certificate → Issuer → Secret. Once the Secret is created, the page (not
// reloaded) turns the Certificate Current and the highlight goes.
func TestPageShowsRootCauseAndUpdatesLive(t *testing.T) {
	testenv.Need(t, env)
	exe := chromium(t)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	env.KubectlApply(t, ns, `
apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata: {name: ca}
spec: {ca: {secretName: ca-key-pair}}
---
apiVersion: pki.converge.dev/v1alpha1
kind: Certificate
metadata: {name: web}
spec: {secretName: web-tls, dnsNames: [web.example.com], issuerRef: {name: ca}}
`)
	_, url := serve(t, env.Config, ns, "certificate/web")

	actx, acancel := chromedp.NewExecAllocator(t.Context(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1100, 560))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	dump := func(err error) {
		t.Helper()
		html, _ := chromedp.Run(bctx, chromedp.OuterHTML("html"))
		t.Fatalf("browser: %v\npage:\n%s", err, html)
	}
	step := func(d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, d)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			dump(err)
		}
	}
	value := func(a chromedp.Action[string]) string {
		t.Helper()
		return within(bctx, 10*time.Second, dump, a)
	}
	// CONVERGE_UI_SCREENSHOTS=DIR keeps pictures of the page (docs/why.md).
	shot := func(name string) {
		t.Helper()
		dir := os.Getenv("CONVERGE_UI_SCREENSHOTS")
		if dir == "" {
			return
		}
		png := within(bctx, 10*time.Second, dump, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The first action starts the browser: no timeout on it.
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}

	// The graph renders, and (as the controllers catch up) the missing
	// Secret becomes the highlighted root cause, pushed to the open page.
	step(90*time.Second,
		chromedp.WaitVisible(`#live[data-state="live"]`),
		chromedp.WaitVisible(`li.node[data-kind="Certificate"][data-name="web"]`),
		chromedp.WaitVisible(`li.node.root-cause[data-kind="Secret"][data-name="ca-key-pair"][data-status="NotFound"]`))
	path := within(bctx, 10*time.Second, dump, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('li.node.on-path')).map(e => e.dataset.kind + '/' + e.dataset.name)`))
	g.Expect(path).To(Equal([]string{"Certificate/web", "Issuer/ca", "Secret/ca-key-pair"}))
	cause := value(chromedp.Text(`.cause`))
	g.Expect(cause).To(ContainSubstring("Root cause: Secret/ca-key-pair in " + ns + " is NotFound"))
	g.Expect(cause).To(ContainSubstring("kubectl -n " + ns + " create secret generic ca-key-pair"))
	// The Issuer's own reason arrives when its controller has looked (the
	// Secret is the root cause even before).
	within(bctx, 60*time.Second, dump, chromedp.Poll[bool](`(document.querySelector('li.node[data-kind="Issuer"][data-name="ca"] > .row .reason') || {}).textContent === 'CASecretInvalid'`))
	shot("ui-root-cause.png")
	within(bctx, 10*time.Second, dump, chromedp.Evaluate[bool](`window.notReloaded = true`))

	// The cause is fixed: the page follows without a reload.
	created := time.Now()
	g.Expect(env.Client.Create(t.Context(), caSecret(t, ns, "ca-key-pair"))).To(Succeed())
	step(90*time.Second,
		chromedp.WaitVisible(`#graph > section.root > ul.tree > li.node[data-kind="Certificate"][data-name="web"][data-status="Current"]`),
		chromedp.WaitNotPresent(`li.node.root-cause`))
	t.Logf("page showed the Certificate Current %s after the Secret was created", time.Since(created).Round(time.Millisecond))
	notReloaded := within(bctx, 10*time.Second, dump, chromedp.Evaluate[bool](`window.notReloaded === true`))
	ok := value(chromedp.Text(`.ok`))
	secretStatus := value(func(ctx context.Context, tg *chromedp.Target) (string, error) {
		r, err := chromedp.AttributeValue(`li.node[data-kind="Secret"][data-name="ca-key-pair"]`, "data-status")(ctx, tg)
		return r.Value, err
	})
	shot("ui-current.png")
	g.Expect(notReloaded).To(BeTrue(), "the page was updated in place, not reloaded")
	g.Expect(ok).To(ContainSubstring("Everything here is Current."))
	g.Expect(secretStatus).To(Equal("Current"))

	// A new Event about an object of the graph (the Issuer, whose status
	// no longer changes) is pushed to the page too: the server watches the
	// Events of the graph's namespaces. An Event about an object outside
	// the graph is not shown.
	issuer := &unstructured.Unstructured{}
	issuer.SetGroupVersionKind(schema.GroupVersionKind{Group: "pki.converge.dev", Version: "v1alpha1", Kind: "Issuer"})
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "ca"}, issuer)).To(Succeed())
	event := func(name, kind, obj string, uid types.UID, msg string) *corev1.Event {
		now := metav1.Now()
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			InvolvedObject: corev1.ObjectReference{APIVersion: "pki.converge.dev/v1alpha1", Kind: kind, Namespace: ns, Name: obj, UID: uid},
			Type:           corev1.EventTypeWarning, Reason: "Rotated", Message: msg, Count: 1,
			FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "ui-test"}}
	}
	g.Expect(env.Client.Create(t.Context(), event("elsewhere", "Issuer", "other", "", "not about the graph"))).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), event("rotated", "Issuer", "ca", issuer.GetUID(), "the CA was rotated by the ui test"))).To(Succeed())
	within(bctx, 30*time.Second, dump, chromedp.Poll[bool](`Array.from(document.querySelectorAll('li.node[data-kind="Issuer"][data-name="ca"] > ul.events > li')).some(e => e.textContent.includes('the CA was rotated by the ui test'))`))
	g.Expect(within(bctx, 10*time.Second, dump, chromedp.Evaluate[bool](`window.notReloaded === true`))).To(BeTrue(), "the Event was pushed, not reloaded")
	g.Expect(value(chromedp.Text(`#graph`))).NotTo(ContainSubstring("not about the graph"))
}

// TestPageNeedsTheToken: every path refuses a request without this run's
// token, or with another.
func TestPageNeedsTheToken(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	env.KubectlApply(t, ns, `
apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata: {name: self}
spec: {selfSigned: {}}
`)
	s, url := serve(t, env.Config, ns, "issuer/self")
	g.Expect(url).To(HaveSuffix("/?token=" + s.Token()))
	g.Expect(len(s.Token())).To(BeNumerically(">=", 32))
	base := strings.TrimSuffix(url, "/?token="+s.Token())
	for _, p := range []string{"/", "/events", "/ui.js", "/ui.css", "/?token=", "/?token=" + strings.Repeat("0", len(s.Token())), "/events?token=x"} {
		code, body := get(t, base+p)
		g.Expect(code).To(Equal(http.StatusForbidden), p)
		g.Expect(body).NotTo(ContainSubstring("Issuer/self"), p)
	}
	code, body := get(t, url)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring(`data-kind="Issuer" data-name="self"`))
	code, _ = get(t, base+"/ui.js?token="+s.Token())
	g.Expect(code).To(Equal(http.StatusOK))
	_, _, err := s.Listen("0.0.0.0:0")
	g.Expect(err).To(MatchError(ContainSubstring("loopback only")))
}

// TestPageAsTenantSeesOnlyItsNamespace: a page served with a tenant's
// identity lists the tenant's objects, shows another namespace as
// Forbidden, and an object there as Forbidden, never its state.
func TestPageAsTenantSeesOnlyItsNamespace(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	mine := env.NewNamespace(t)
	other := env.NewNamespace(t)
	user := env.GrantTenant(t, mine, "tenant")
	env.KubectlApply(t, mine, `
apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata: {name: mine}
spec: {selfSigned: {}}
`)
	env.KubectlApply(t, other, `
apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata: {name: theirs}
spec: {selfSigned: {}}
---
apiVersion: pki.converge.dev/v1alpha1
kind: Certificate
metadata: {name: secret-project}
spec: {secretName: sp-tls, dnsNames: [sp.example.com], issuerRef: {name: theirs}}
`)
	tenant := rest.CopyConfig(env.Config)
	tenant.Impersonate = rest.ImpersonationConfig{UserName: user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + mine, "system:authenticated"}}

	// The admin sees the other namespace (the objects exist).
	_, adminURL := serve(t, env.Config, other, "")
	testenv.Eventually(g, func(g Gomega) {
		_, body := get(t, adminURL)
		g.Expect(body).To(ContainSubstring(`data-name="secret-project"`))
	}).Should(Succeed())

	_, url := serve(t, tenant, mine, "")
	code, body := get(t, url)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring(`data-kind="Issuer" data-name="mine"`))
	g.Expect(body).NotTo(ContainSubstring("theirs"))
	g.Expect(body).NotTo(ContainSubstring("secret-project"))
	g.Expect(body).NotTo(ContainSubstring("you may not list Converge objects"))

	_, url = serve(t, tenant, other, "")
	code, body = get(t, url)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring("Forbidden: you may not list Converge objects in namespace " + other))
	g.Expect(body).NotTo(ContainSubstring("theirs"))
	g.Expect(body).NotTo(ContainSubstring("secret-project"))

	_, url = serve(t, tenant, other, "certificate/secret-project")
	code, body = get(t, url)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(MatchRegexp(`data-kind="Certificate" data-name="secret-project" data-status="Forbidden"`))
	g.Expect(body).NotTo(ContainSubstring("theirs"), "nothing behind a Forbidden object is read")
	g.Expect(body).NotTo(ContainSubstring(">Current<"))
	g.Expect(body).To(ContainSubstring(fmt.Sprintf("kubectl auth can-i get certificates.pki.converge.dev secret-project -n %s", other)))
}

// TestConvergeUIVerb runs the built binary as a person does: it prints the
// page's URL (with the token), serves the object's graph with the
// kubeconfig's identity, refuses a non-loopback --address, and stops on
// SIGINT.
func TestConvergeUIVerb(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	env.KubectlApply(t, ns, `
apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata: {name: self}
spec: {selfSigned: {}}
`)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	exe, err := replicas.Build(t.Context(), root, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())

	out, err := exec.Command(exe, "ui", "issuer/self", "-n", ns, "--kubeconfig", env.KubeconfigPath, "--address", "0.0.0.0:0").CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("loopback only"))

	cmd := exec.Command(exe, "ui", "issuer/self", "-n", ns, "--kubeconfig", env.KubeconfigPath)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred(), stderr.String())
	g.Expect(line).To(MatchRegexp(`^converge ui: open http://127\.0\.0\.1:\d+/\?token=[0-9a-f]{48}\n$`))
	url := strings.TrimSuffix(strings.TrimPrefix(line, "converge ui: open "), "\n")
	code, body := get(t, url)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring(`data-kind="Issuer" data-name="self"`))
	code, _ = get(t, strings.Split(url, "?")[0])
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(cmd.Process.Signal(os.Interrupt)).To(Succeed())
	g.Expect(cmd.Wait()).To(Succeed(), stderr.String())
}
