package machineupgrade_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/controller/machineupgrade"
	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/webhookcert"
)

// countGets counts the GETs of one path that go through it.
type countGets struct {
	next http.RoundTripper
	path string
	n    *atomic.Int64
}

func (c countGets) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Path == c.path {
		c.n.Add(1)
	}
	return c.next.RoundTrip(req)
}

// upgradeAPI starts a manager running the MachineUpgrade controller (of a
// shard no object of the test is in; its cache restricted to watch when
// not empty) and returns that controller's own clients, as
// SetupWithManager takes them, with a count of the GETs of the Secret key
// any client of the manager sends.
func upgradeAPI(t *testing.T, key types.NamespacedName, watch ...string) (*setup.ControllerAPI, *atomic.Int64) {
	t.Helper()
	gets := &atomic.Int64{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return countGets{next: rt, path: "/api/v1/namespaces/" + key.Namespace + "/secrets/" + key.Name, n: gets}
	})
	o := setup.DefaultOptions()
	o.MetricsBindAddress, o.HealthProbeBindAddress, o.SecureMetrics = "0", "0", false
	o.Webhook.Disabled = true
	o.Receiver.BindAddress = "0"
	o.SkipControllerNameValidation = true
	o.GitOps.CacheDir = t.TempDir()
	o.Controllers = []string{"machineupgrade"}
	o.ShardKey = "bmcca-" + key.Namespace
	o.WatchNamespaces = watch
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	cv, err := setup.New(ctx, cfg, o)
	if err != nil {
		cancel()
		t.Fatalf("building a manager: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cv.Manager.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !cv.Manager.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}
	return cv.APIs[machineupgrade.ControllerName], gets
}

// redfishServer is a TLS server for 127.0.0.1 whose certificate ca issued;
// conns counts the connections it accepted.
func redfishServer(t *testing.T, ca *webhookcert.Bundle) (addr string, conns *atomic.Int64) {
	t.Helper()
	served, err := ca.IssueServing([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := served.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*pair}, MinVersion: tls.VersionTLS12}
	conns = &atomic.Int64{}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), conns
}

// dial opens (and closes) one new connection as the controller's Redfish
// client does.
func dial(ctx context.Context, r *machineupgrade.Reconciler, addr string) error {
	c, err := r.DialBMC(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// rotate replaces the CA in the Secret key with a new one (as an
// administrator would after the old key leaked) and returns it.
func rotate(t *testing.T, key types.NamespacedName) *webhookcert.Bundle {
	t.Helper()
	g := NewWithT(t)
	ca, err := bmc.NewCA()
	g.Expect(err).NotTo(HaveOccurred())
	sec := &corev1.Secret{}
	g.Expect(env.Client.Get(t.Context(), key, sec)).To(Succeed())
	sec.Data = map[string][]byte{corev1.TLSCertKey: ca.CACert, corev1.TLSPrivateKeyKey: ca.CAKey, bmc.CABundleKey: ca.CACert}
	g.Expect(env.Client.Update(t.Context(), sec)).To(Succeed())
	return ca
}

// newBMCCA makes a BMC CA Secret in a new namespace, as the BMC server
// makes it, and returns its key, the CA and the Secret as created.
func newBMCCA(t *testing.T) (types.NamespacedName, *webhookcert.Bundle, *corev1.Secret) {
	t.Helper()
	testenv.Need(t, env)
	g := NewWithT(t)
	key := types.NamespacedName{Namespace: env.NewNamespace(t), Name: "bmc-ca"}
	ca, created, err := bmc.LoadOrCreateCA(t.Context(), env.Client, env.Client, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(created).To(BeTrue())
	sec := &corev1.Secret{}
	g.Expect(env.Client.Get(t.Context(), key, sec)).To(Succeed())
	return key, ca, sec
}

// The controller keeps the BMC CA's pool in memory: new connections to the
// BMCs cost no read of the CA Secret. The Secret it made is labelled so
// that the shared cache keeps its data (no GET at all); a Secret made by
// an earlier version, without the label, is read once (the shared cache's
// LRU keeps it by resourceVersion), not once per connection. A cache that
// does not watch the Secret's namespace (--watch-namespace) cannot tell
// whether the CA changed: the Secret is then read at each connection, as
// before the pool was kept, and the connections still verify.
func TestBMCCAIsNotReadPerConnection(t *testing.T) {
	labelled, ca, sec := newBMCCA(t)
	g := NewWithT(t)
	ctx := t.Context()
	ns := labelled.Namespace
	g.Expect(sec.Labels).To(HaveKeyWithValue(secretcache.Label, "true"))
	unlabelled := types.NamespacedName{Namespace: ns, Name: "old-bmc-ca"}
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: unlabelled.Name}, Type: sec.Type, Data: sec.Data})).To(Succeed())
	addr, _ := redfishServer(t, ca)

	const n = 20
	for _, c := range []struct {
		key   types.NamespacedName
		watch []string
		want  int64
	}{{labelled, nil, 0}, {unlabelled, nil, 1}, {labelled, []string{"default"}, n}} {
		api, gets := upgradeAPI(t, c.key, c.watch...)
		r := &machineupgrade.Reconciler{Client: api.Client, APIReader: api.APIReader, BMCCASecret: c.key}
		for i := range n {
			g.Expect(dial(ctx, r, addr)).To(Succeed(), "connection %d", i)
		}
		g.Expect(gets.Load()).To(Equal(c.want), "GETs of the CA Secret %s for %d connections (cache watching %v)", c.key, n, c.watch)
	}
}

// A replaced BMC CA is picked up: the new CA is trusted at once (a
// certificate of an authority the pool does not know makes the controller
// read the Secret again, once, and retry), and the old one stops being
// trusted as soon as the manager's cache sees the change, without any
// failure to prompt it.
func TestBMCCARotationIsPickedUp(t *testing.T) {
	key, oldCA, before := newBMCCA(t)
	g := NewWithT(t)
	ctx := t.Context()
	oldBMC, oldConns := redfishServer(t, oldCA)
	api, gets := upgradeAPI(t, key)
	r := &machineupgrade.Reconciler{Client: api.Client, APIReader: api.APIReader, BMCCASecret: key}
	// stale reads the CA from a cache that never sees the rotation.
	staleCache := testenv.NewStaleClient(api.Client)
	staleCache.Pin(before, time.Time{})
	stale := &machineupgrade.Reconciler{Client: staleCache, APIReader: api.APIReader, BMCCASecret: key}
	g.Expect(dial(ctx, r, oldBMC)).To(Succeed())
	g.Expect(dial(ctx, stale, oldBMC)).To(Succeed())

	newCA := rotate(t, key)
	newBMC, _ := redfishServer(t, newCA)

	// The cache tells: the old CA is refused, though nothing failed.
	g.Eventually(func() error { return dial(ctx, r, oldBMC) }).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).
		Should(MatchError(ContainSubstring("the BMC's certificate does not verify against the BMC CA (Secret " + key.String() + ")")))
	g.Expect(dial(ctx, r, newBMC)).To(Succeed())

	// The cache does not tell yet: the first certificate of the new CA is
	// verified after one read of the Secret, and the CA read is kept.
	n := gets.Load()
	g.Expect(dial(ctx, stale, newBMC)).To(Succeed(), "a certificate of the new CA while the cache holds the old one")
	g.Expect(gets.Load()).To(Equal(n+1), "the CA Secret was not read again once")
	g.Expect(dial(ctx, stale, newBMC)).To(Succeed())
	g.Expect(gets.Load()).To(Equal(n+1), "the CA read again was not kept")
	// A certificate of an unknown authority that reading the CA again does
	// not change is refused after one handshake.
	c := oldConns.Load()
	err := dial(ctx, stale, oldBMC)
	g.Expect(err).To(MatchError(ContainSubstring("x509: certificate signed by unknown authority")), "the old CA is still trusted")
	g.Expect(oldConns.Load()).To(Equal(c+1), "the handshake was tried again with the same CA")
	g.Expect(gets.Load()).To(Equal(n+2), "the CA Secret was not read again after the failure")
}
