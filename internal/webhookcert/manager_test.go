package webhookcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/converge-dev/converge/internal/localcp"
)

// servedLeaf returns the leaf certificate m currently serves.
func servedLeaf(t *testing.T, m *Manager) *x509.Certificate {
	t.Helper()
	c, err := m.GetCertificate(nil)
	if err != nil {
		t.Fatalf("GetCertificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatalf("parsing served certificate: %v", err)
	}
	return leaf
}

func mustLoad(t *testing.T, s Store) *Bundle {
	t.Helper()
	b, err := s.Load(t.Context())
	if err != nil {
		t.Fatalf("loading %s: %v", s.Describe(), err)
	}
	if b == nil {
		t.Fatalf("%s holds no bundle", s.Describe())
	}
	return b
}

func TestManagerDirStoreIssueKeepAndRenew(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "certs") // created by Save
	store := DirStore{Dir: dir}
	start := time.Now()
	m := &Manager{Store: store, Hosts: []string{"127.0.0.1", "localhost"}, SelfManage: true,
		now: func() time.Time { return start }}

	_, err := m.GetCertificate(nil)
	g.Expect(err).To(MatchError(ContainSubstring("not loaded")), "nothing is served before the first Sync")

	// First Sync issues a bundle and saves it.
	g.Expect(m.Sync(ctx)).To(Succeed())
	for _, f := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		g.Expect(err).NotTo(HaveOccurred(), f)
		g.Expect(fi.Size()).To(BeNumerically(">", 0), f)
		if strings.HasSuffix(f, ".key") {
			g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), "%s must be private", f)
		}
	}
	first := mustLoad(t, store)
	g.Expect(first.Check(m.Hosts, start, 30*24*time.Hour)).To(Succeed())
	g.Expect(servedLeaf(t, m).Raw).To(Equal(mustParse(t, first.Cert).Raw), "serves what it saved")

	// A second Sync (a restart, or the resync tick) keeps everything.
	m2 := &Manager{Store: store, Hosts: m.Hosts, SelfManage: true, now: m.now}
	g.Expect(m.Sync(ctx)).To(Succeed())
	g.Expect(m2.Sync(ctx)).To(Succeed())
	g.Expect(mustLoad(t, store).Equal(first)).To(BeTrue(), "no churn: the stored bundle is unchanged")
	g.Expect(servedLeaf(t, m).Raw).To(Equal(mustParse(t, first.Cert).Raw))
	g.Expect(servedLeaf(t, m2).Raw).To(Equal(mustParse(t, first.Cert).Raw), "a restarted manager serves the same certificate")

	// ~11.5 months later the serving certificate is within RenewBefore (30
	// days) of expiry: it is renewed, with the same CA.
	later := start.Add(350 * 24 * time.Hour)
	m.now = func() time.Time { return later }
	g.Expect(m.Sync(ctx)).To(Succeed())
	renewed := mustLoad(t, store)
	g.Expect(renewed.CACert).To(Equal(first.CACert), "renewal keeps the CA, so caBundle stays valid")
	g.Expect(renewed.CAKey).To(Equal(first.CAKey))
	g.Expect(renewed.Cert).NotTo(Equal(first.Cert))
	g.Expect(renewed.Key).NotTo(Equal(first.Key))
	g.Expect(renewed.Check(m.Hosts, later, 30*24*time.Hour)).To(Succeed())
	g.Expect(renewed.NotAfter()).To(BeTemporally("~", later.Add(servingValidity), time.Second))
	g.Expect(servedLeaf(t, m).Raw).To(Equal(mustParse(t, renewed.Cert).Raw), "the renewed certificate is served at once")

	// Renewal is stable too.
	g.Expect(m.Sync(ctx)).To(Succeed())
	g.Expect(mustLoad(t, store).Equal(renewed)).To(BeTrue())
}

func TestManagerDirStoreReplacesUnusableBundle(t *testing.T) {
	now := time.Now()
	hosts := []string{"127.0.0.1"}
	other := mustIssue(t, []string{"other.example.com"}, now)
	expiredCA := bundleWithCAValidity(t, hosts, now.Add(-48*time.Hour), 24*time.Hour)
	cases := []struct {
		name     string
		stored   *Bundle
		keepsCA  bool
		newCAWhy string
	}{
		{name: "wrong hosts, CA reusable", stored: other, keepsCA: true},
		{name: "CA without its key", stored: &Bundle{CACert: other.CACert, Cert: other.Cert, Key: other.Key}, keepsCA: false},
		{name: "expired CA", stored: expiredCA, keepsCA: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			store := DirStore{Dir: t.TempDir()}
			g.Expect(store.Save(t.Context(), nil, tc.stored)).To(Succeed())
			m := &Manager{Store: store, Hosts: hosts, SelfManage: true}
			g.Expect(m.Sync(t.Context())).To(Succeed())
			got := mustLoad(t, store)
			g.Expect(got.Check(hosts, now, 30*24*time.Hour)).To(Succeed())
			if tc.keepsCA {
				g.Expect(got.CACert).To(Equal(tc.stored.CACert))
			} else {
				g.Expect(got.CACert).NotTo(Equal(tc.stored.CACert))
			}
		})
	}
}

func TestManagerWithoutSelfManage(t *testing.T) {
	t.Run("empty store", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		m := &Manager{Store: DirStore{Dir: dir}, Hosts: []string{"127.0.0.1"}}
		err := m.Sync(t.Context())
		g.Expect(err).To(MatchError(ContainSubstring("directory " + dir)))
		entries, _ := os.ReadDir(dir)
		g.Expect(entries).To(BeEmpty(), "a non-self-managing Manager writes nothing")
		_, err = m.GetCertificate(nil)
		g.Expect(err).To(HaveOccurred())
	})
	t.Run("valid bundle is loaded as is", func(t *testing.T) {
		g := NewWithT(t)
		store := DirStore{Dir: t.TempDir()}
		b := mustIssue(t, []string{"127.0.0.1"}, time.Now())
		b.CAKey = nil // owned elsewhere
		g.Expect(store.Save(t.Context(), nil, b)).To(Succeed())
		m := &Manager{Store: store, Hosts: []string{"127.0.0.1"}}
		g.Expect(m.Sync(t.Context())).To(Succeed())
		g.Expect(servedLeaf(t, m).Raw).To(Equal(mustParse(t, b.Cert).Raw))
		g.Expect(mustLoad(t, store).Equal(b)).To(BeTrue())
	})
	t.Run("close to expiry is still served, not renewed", func(t *testing.T) {
		g := NewWithT(t)
		store := DirStore{Dir: t.TempDir()}
		b := mustIssue(t, []string{"127.0.0.1"}, time.Now())
		g.Expect(store.Save(t.Context(), nil, b)).To(Succeed())
		almost := b.NotAfter().Add(-24 * time.Hour)
		m := &Manager{Store: store, Hosts: []string{"127.0.0.1"}, now: func() time.Time { return almost }}
		g.Expect(m.Sync(t.Context())).To(Succeed())
		g.Expect(mustLoad(t, store).Equal(b)).To(BeTrue())
	})
	t.Run("wrong hosts", func(t *testing.T) {
		g := NewWithT(t)
		store := DirStore{Dir: t.TempDir()}
		g.Expect(store.Save(t.Context(), nil, mustIssue(t, []string{"other.example.com"}, time.Now()))).To(Succeed())
		m := &Manager{Store: store, Hosts: []string{"127.0.0.1"}}
		g.Expect(m.Sync(t.Context())).To(MatchError(And(ContainSubstring("cannot be used"), ContainSubstring(`"127.0.0.1"`))))
	})
}

// tlsServer accepts TLS connections on 127.0.0.1 with cfg and completes their
// handshakes until the test ends.
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Read(make([]byte, 1)) // until the client hangs up
			})
		}
	})
	return l.Addr().String()
}

// dialSerial connects trusting only caPEM, verifying at time at, and
// returns the server's serial.
func dialSerial(addr string, caPEM []byte, at time.Time) (*big.Int, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("bad CA PEM")
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, Time: func() time.Time { return at }}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, errors.New(err.Error()) // the message, without the certificates
	}
	defer func() { _ = c.Close() }()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func TestManagerServesTLSAndRotatesWithoutRestart(t *testing.T) {
	g := NewWithT(t)
	store := DirStore{Dir: t.TempDir()}
	start := time.Now()
	m := &Manager{Store: store, Hosts: []string{"127.0.0.1"}, SelfManage: true,
		now: func() time.Time { return start }}

	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	m.TLSOpt(cfg)
	addr := tlsServer(t, cfg)

	// Before the first Sync there is nothing to serve: handshakes fail.
	unrelated := mustIssue(t, []string{"127.0.0.1"}, start)
	_, err := dialSerial(addr, unrelated.CACert, start)
	g.Expect(err).To(HaveOccurred())

	g.Expect(m.Sync(t.Context())).To(Succeed())
	first := mustLoad(t, store)
	serial, err := dialSerial(addr, first.CACert, start)
	g.Expect(err).NotTo(HaveOccurred(), "a client trusting only the bundle's CA connects to 127.0.0.1")
	g.Expect(serial).To(Equal(mustParse(t, first.Cert).SerialNumber))

	// A client trusting another CA is refused: the check above is not vacuous.
	_, err = dialSerial(addr, unrelated.CACert, start)
	g.Expect(err).To(MatchError(ContainSubstring("certificate signed by unknown authority")))

	// Rotate: same listener, new certificate on the next connection.
	later := start.Add(350 * 24 * time.Hour)
	m.now = func() time.Time { return later }
	g.Expect(m.Sync(t.Context())).To(Succeed())
	renewed := mustLoad(t, store)
	g.Expect(renewed.CACert).To(Equal(first.CACert))
	newSerial := mustParse(t, renewed.Cert).SerialNumber
	g.Expect(newSerial).NotTo(Equal(serial))
	serial, err = dialSerial(addr, first.CACert, later)
	g.Expect(err).NotTo(HaveOccurred(), "clients trusting the unchanged CA still connect")
	g.Expect(serial).To(Equal(newSerial), "the rotated certificate is served without restarting the listener")
}

// --- Integration tests against a real API server. ---

// binDir is $CONVERGE_BIN_DIR or bin/ at the repository root. (testenv.BinDir
// does the same, but testenv imports this package through internal/setup, so
// an internal test here cannot import it.)
func binDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CONVERGE_BIN_DIR"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module github.com/converge-dev/converge\n") {
			return filepath.Join(dir, "bin")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("not inside the converge repository")
		}
		dir = parent
	}
}

type apiServer struct {
	cs kubernetes.Interface
	c  client.Client
}

func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	if os.Getenv("CONVERGE_SKIP_ENVTEST") != "" {
		t.Skip("CONVERGE_SKIP_ENVTEST is set")
	}
	bin := binDir(t)
	for _, n := range []string{localcp.Etcd, localcp.APIServer} {
		if _, err := os.Stat(filepath.Join(bin, n)); err != nil {
			msg := fmt.Sprintf("*** control-plane binary %s missing in %s: run `make tools` ***", n, bin)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	// Controller-runtime's client logs through the global logger; without
	// one it complains on stderr. Manager logs go to the test via ctx.
	log.SetLogger(logr.Discard())
	// localcp picks free ports by binding port 0 and closing the listener;
	// under load another process (or an outgoing connection's source port)
	// can take one before etcd or the API server binds it. Retry on a fresh
	// data directory and fresh ports in that case only.
	var cp *localcp.ControlPlane
	var err error
	for attempt := 1; ; attempt++ {
		cp, err = localcp.Start(t.Context(), localcp.Config{DataDir: t.TempDir(), BinDir: bin, Ephemeral: true})
		if err == nil {
			break
		}
		if attempt < 3 && strings.Contains(err.Error(), "already in use") {
			t.Logf("starting the control plane (attempt %d), retrying: %v", attempt, err)
			continue
		}
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	cfg, err := cp.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{cs: cs, c: c}
}

func (a *apiServer) namespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := a.cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

func (a *apiServer) secret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	s, err := a.cs.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading Secret %s/%s: %v", ns, name, err)
	}
	return s
}

// barrierStore delays every Save until all the stores sharing loaded have
// done their first Load, so that racing managers really race.
type barrierStore struct {
	Store
	once   sync.Once
	loaded *sync.WaitGroup
}

func (s *barrierStore) Load(ctx context.Context) (*Bundle, error) {
	b, err := s.Store.Load(ctx)
	s.once.Do(s.loaded.Done)
	return b, err
}

func (s *barrierStore) Save(ctx context.Context, prev, next *Bundle) error {
	s.loaded.Wait()
	return s.Store.Save(ctx, prev, next)
}

func TestManagerWithAPIServer(t *testing.T) {
	api := startAPIServer(t)
	hosts := []string{"converge-webhook.converge-system.svc", "127.0.0.1"}

	t.Run("issues the Secret and injects the CA bundle", func(t *testing.T) {
		g := NewWithT(t)
		ctx := log.IntoContext(t.Context(), testr.New(t))
		ns := api.namespace(t, "inject")
		ignore := admissionregistrationv1.Ignore
		none := admissionregistrationv1.SideEffectClassNone
		url := "https://127.0.0.1:1/x"
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "test-vwc"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:                    "test.example.converge.dev",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
				SideEffects:             &none,
				AdmissionReviewVersions: []string{"v1"},
				FailurePolicy:           &ignore,
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{"example.converge.dev"}, APIVersions: []string{"*"}, Resources: []string{"*"},
					},
				}},
			}},
		}
		g.Expect(api.c.Create(ctx, vwc)).To(Succeed())
		t.Cleanup(func() { _ = api.c.Delete(context.WithoutCancel(ctx), vwc) })

		store := NewSecretStore(api.cs, ns, "webhook-cert")
		m := &Manager{Store: store, Hosts: hosts, SelfManage: true, Client: api.c,
			ValidatingConfigs: []string{"test-vwc"},
			// A configuration that is not installed is skipped, not an error.
			MutatingConfigs: []string{"not-installed"}}
		g.Expect(m.Sync(ctx)).To(Succeed())

		sec := api.secret(t, ns, "webhook-cert")
		g.Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
		g.Expect(sec.Data).To(HaveKey("ca.crt"))
		g.Expect(sec.Data).To(HaveKey("ca.key"))
		g.Expect(sec.Data).To(HaveKey("tls.crt"))
		g.Expect(sec.Data).To(HaveKey("tls.key"))
		b := &Bundle{CACert: sec.Data["ca.crt"], CAKey: sec.Data["ca.key"], Cert: sec.Data["tls.crt"], Key: sec.Data["tls.key"]}
		g.Expect(b.Check(hosts, time.Now(), 30*24*time.Hour)).To(Succeed())
		g.Expect(servedLeaf(t, m).Raw).To(Equal(mustParse(t, b.Cert).Raw))

		got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(api.c.Get(ctx, client.ObjectKey{Name: "test-vwc"}, got)).To(Succeed())
		g.Expect(got.Webhooks).To(HaveLen(1))
		g.Expect(got.Webhooks[0].ClientConfig.CABundle).To(Equal(sec.Data["ca.crt"]))
		g.Expect(*got.Webhooks[0].ClientConfig.URL).To(Equal(url), "injection changes only the caBundle")

		// Sync again: neither the Secret nor the configuration is written.
		g.Expect(m.Sync(ctx)).To(Succeed())
		g.Expect(api.secret(t, ns, "webhook-cert").ResourceVersion).To(Equal(sec.ResourceVersion))
		again := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(api.c.Get(ctx, client.ObjectKey{Name: "test-vwc"}, again)).To(Succeed())
		g.Expect(again.ResourceVersion).To(Equal(got.ResourceVersion))

		// Someone resets the caBundle: the next Sync puts it back.
		again.Webhooks[0].ClientConfig.CABundle = nil
		g.Expect(api.c.Update(ctx, again)).To(Succeed())
		g.Expect(m.Sync(ctx)).To(Succeed())
		g.Expect(api.c.Get(ctx, client.ObjectKey{Name: "test-vwc"}, again)).To(Succeed())
		g.Expect(again.Webhooks[0].ClientConfig.CABundle).To(Equal(sec.Data["ca.crt"]))
	})

	t.Run("serves a Secret rotated by someone else without restart", func(t *testing.T) {
		g := NewWithT(t)
		ns := api.namespace(t, "rotate")
		store := NewSecretStore(api.cs, ns, "webhook-cert")
		m := &Manager{Store: store, Hosts: hosts, SelfManage: true, Resync: time.Hour}
		g.Expect(m.Sync(t.Context())).To(Succeed())
		before := servedLeaf(t, m)

		ctx, cancel := context.WithCancel(log.IntoContext(t.Context(), testr.New(t)))
		done := make(chan error, 1)
		go func() { done <- m.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Start: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Start did not return after its context was cancelled")
			}
		})
		// Wait for the watch to be established, so the change below is
		// seen through it and not through the initial list.
		g.Eventually(store.informer.HasSynced).WithTimeout(30 * time.Second).Should(BeTrue())

		next := mustIssue(t, hosts, time.Now())
		sec := api.secret(t, ns, "webhook-cert")
		sec.Data = map[string][]byte{"ca.crt": next.CACert, "ca.key": next.CAKey, "tls.crt": next.Cert, "tls.key": next.Key}
		_, err := api.cs.CoreV1().Secrets(ns).Update(t.Context(), sec, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())

		want := mustParse(t, next.Cert)
		g.Expect(want.SerialNumber).NotTo(Equal(before.SerialNumber))
		g.Eventually(func() []byte { return servedLeaf(t, m).Raw }).
			WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).
			Should(Equal(want.Raw), "the rotated Secret is served without a restart (Resync is an hour)")
		g.Expect(api.secret(t, ns, "webhook-cert").Data["tls.crt"]).To(Equal(next.Cert),
			"a valid bundle written by someone else is used, not replaced")
	})

	t.Run("racing managers converge on one certificate", func(t *testing.T) {
		now := time.Now()
		cases := []struct {
			name   string
			stored *Bundle // nil: no Secret yet
		}{
			{name: "no Secret"},
			{name: "expiring Secret", stored: mustIssue(t, hosts, now.Add(-350*24*time.Hour))},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				ctx := log.IntoContext(t.Context(), testr.New(t))
				ns := api.namespace(t, fmt.Sprintf("race-%d", i))
				if tc.stored != nil {
					g.Expect(NewSecretStore(api.cs, ns, "webhook-cert").Save(ctx, nil, tc.stored)).To(Succeed())
				}
				const replicas = 3
				loaded := &sync.WaitGroup{}
				loaded.Add(replicas)
				managers := make([]*Manager, replicas)
				for r := range managers {
					managers[r] = &Manager{
						Store:      &barrierStore{Store: NewSecretStore(api.cs, ns, "webhook-cert"), loaded: loaded},
						Hosts:      hosts,
						SelfManage: true,
					}
				}
				errs := make([]error, replicas)
				var wg sync.WaitGroup
				for r, m := range managers {
					wg.Go(func() { errs[r] = m.Sync(ctx) })
				}
				wg.Wait()
				for r, err := range errs {
					g.Expect(err).NotTo(HaveOccurred(), "replica %d", r)
				}

				sec := api.secret(t, ns, "webhook-cert")
				stored := &Bundle{CACert: sec.Data["ca.crt"], CAKey: sec.Data["ca.key"], Cert: sec.Data["tls.crt"], Key: sec.Data["tls.key"]}
				g.Expect(stored.Check(hosts, now, 30*24*time.Hour)).To(Succeed())
				for r, m := range managers {
					g.Expect(servedLeaf(t, m).Raw).To(Equal(mustParse(t, stored.Cert).Raw),
						"replica %d serves the certificate that won", r)
				}
				if tc.stored != nil {
					g.Expect(stored.CACert).To(Equal(tc.stored.CACert), "concurrent renewals keep the CA")
					g.Expect(stored.Cert).NotTo(Equal(tc.stored.Cert))
				}
			})
		}
	})

	// A CA kept alone in a Secret: created once, never replaced, and a
	// Secret holding no CA (here a serving certificate and its key) is an
	// error, not overwritten.
	t.Run("a CA Secret store is create-only", func(t *testing.T) {
		g := NewWithT(t)
		ctx := t.Context()
		ns := api.namespace(t, "ca-store")
		store := &CASecretStore{Reader: api.c, Writer: api.c, Key: types.NamespacedName{Namespace: ns, Name: "ca"}, Labels: map[string]string{"l": "v"}}
		subject := pkix.Name{CommonName: "test-ca"}
		ca, created, err := LoadOrCreateCA(ctx, store, subject, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(created).To(BeTrue())
		sec := api.secret(t, ns, "ca")
		g.Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
		g.Expect(sec.Labels).To(HaveKeyWithValue("l", "v"))
		g.Expect(sec.Data).To(Equal(map[string][]byte{"tls.crt": ca.CACert, "tls.key": ca.CAKey, "ca.crt": ca.CACert}))
		g.Expect(mustParse(t, ca.CACert).Subject.CommonName).To(Equal("test-ca"))

		again, created, err := LoadOrCreateCA(ctx, store, subject, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(created).To(BeFalse())
		g.Expect(again.CACert).To(Equal(ca.CACert))
		other, err := NewCA(subject, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(store.Save(ctx, again, other)).To(MatchError(ContainSubstring("is create-only")))
		g.Expect(api.secret(t, ns, "ca").ResourceVersion).To(Equal(sec.ResourceVersion), "the CA Secret was written")

		leaf, err := ca.IssueServing([]string{"127.0.0.1"}, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		notCA := &CASecretStore{Reader: api.c, Writer: api.c, Key: types.NamespacedName{Namespace: ns, Name: "not-ca"}}
		g.Expect(api.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-ca"},
			Data: map[string][]byte{"tls.crt": leaf.Cert, "tls.key": leaf.Key}})).To(Succeed())
		before := api.secret(t, ns, "not-ca")
		_, _, err = LoadOrCreateCA(ctx, notCA, subject, time.Now())
		g.Expect(err).To(MatchError(ContainSubstring("Secret " + ns + "/not-ca holds no valid CA (delete it to have a new one made): the CA certificate is not a CA")))
		g.Expect(api.secret(t, ns, "not-ca").ResourceVersion).To(Equal(before.ResourceVersion), "a Secret holding no CA was written")
	})
}
