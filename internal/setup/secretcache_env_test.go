package setup_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// countingReader counts the Secret reads that reach the API server.
type countingReader struct {
	client.Reader
	gets atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestSecretDataStaysOutOfTheCache: a manager's informer keeps an
// unlabelled 10 KiB Secret's metadata but not its data, and a labelled one
// and a small one (a token) whole;
// every client of the manager (its own, a controller's, the cache itself)
// still reads the whole Secret. An unchanged Secret read again costs no
// request; a changed one is read again, never served stale once the cache
// has seen the change; a list of Secrets is whole too.
func TestSecretDataStaysOutOfTheCache(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	cv := newUnstartedManager(t, []string{"issuer"}, nil, nil)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cv.Manager.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ns := env.NewNamespace(t)
	big := strings.Repeat("x", 10<<10)
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, Data: map[string][]byte{"k": []byte(big)}}
	kept := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept", Labels: map[string]string{secretcache.Label: "true"}},
		Data: map[string][]byte{"k": []byte(big)}}
	small := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "small"}, Data: map[string][]byte{"token": []byte("t0k3n")}}
	for _, s := range []*corev1.Secret{plain, kept, small} {
		g.Expect(env.Client.Create(ctx, s)).To(Succeed())
	}

	sc, ok := cv.Manager.GetCache().(*secretcache.Reader)
	g.Expect(ok).To(BeTrue(), "the manager's cache is %T, not a secretcache.Reader", cv.Manager.GetCache())
	raw := sc.Cache
	testenv.Eventually(g, func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(raw.Get(ctx, client.ObjectKeyFromObject(plain), s)).To(Succeed())
		g.Expect(s.ResourceVersion).NotTo(BeEmpty())
		g.Expect(s.Data).To(BeEmpty(), "the informer keeps an unlabelled Secret's data")
		g.Expect(s.ManagedFields).To(BeEmpty())
		g.Expect(raw.Get(ctx, client.ObjectKeyFromObject(kept), s)).To(Succeed())
		g.Expect(string(s.Data["k"])).To(Equal(big), "a labelled Secret is cached whole")
		g.Expect(raw.Get(ctx, client.ObjectKeyFromObject(small), s)).To(Succeed())
		g.Expect(string(s.Data["token"])).To(Equal("t0k3n"), "a Secret of at most KeepBytes is cached whole")
	}).Should(Succeed())

	for name, c := range map[string]client.Reader{"manager client": cv.Manager.GetClient(), "manager cache": cv.Manager.GetCache(),
		"issuer controller client": cv.APIs["issuer"].Client} {
		s := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(plain), s)).To(Succeed(), name)
		g.Expect(string(s.Data["k"])).To(Equal(big), name)
	}
	l := &corev1.SecretList{}
	g.Expect(cv.APIs["issuer"].Client.List(ctx, l, client.InNamespace(ns))).To(Succeed())
	g.Expect(l.Items).To(HaveLen(3))
	for _, s := range l.Items {
		g.Expect(s.Data).NotTo(BeEmpty(), "listed Secret %s", s.Name)
	}

	// The LRU: one read for an unchanged Secret, one more after a change.
	live := &countingReader{Reader: env.Client}
	r := &secretcache.Reader{Cache: raw, Live: live, Data: secretcache.NewData(1 << 20)}
	read := func(g Gomega) string {
		s := &corev1.Secret{}
		g.Expect(r.Get(ctx, client.ObjectKeyFromObject(plain), s)).To(Succeed())
		return string(s.Data["k"])
	}
	g.Expect(read(g)).To(Equal(big))
	g.Expect(read(g)).To(Equal(big))
	g.Expect(live.gets.Load()).To(BeEquivalentTo(1), "an unchanged Secret was read from the API server again")
	plain.Data = map[string][]byte{"k": []byte("changed")}
	g.Expect(env.Client.Update(ctx, plain)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) { g.Expect(read(g)).To(Equal("changed")) }).Should(Succeed())
	before := live.gets.Load()
	g.Expect(read(g)).To(Equal("changed"))
	g.Expect(live.gets.Load()).To(Equal(before))
	g.Expect(r.Data.Len()).To(Equal(1))
}

// TestAllSecretDataCanBeCached: --cache-all-secret-data keeps the informer
// as controller-runtime makes it.
func TestAllSecretDataCanBeCached(t *testing.T) {
	testenv.Need(t, env)
	o := setup.DefaultOptions()
	o.MetricsBindAddress, o.HealthProbeBindAddress, o.SecureMetrics = "0", "0", false
	o.Webhook.Disabled = true
	o.SkipControllerNameValidation = true
	o.GitOps.CacheDir = t.TempDir()
	o.Controllers = []string{"issuer"}
	o.CacheAllSecretData = true
	cv, err := setup.New(t.Context(), env.Config, o)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	_, wrapped := cv.Manager.GetCache().(*secretcache.Reader)
	NewWithT(t).Expect(wrapped).To(BeFalse())
}

// TestSecretCacheBudgetReachesTheCache: --secret-cache-max-bytes
// (Options.SecretCacheMaxBytes) bounds what the manager's informer keeps,
// labels or not: with room for two labelled 30 KiB Secrets, a third is kept
// as metadata only (and still read whole through the manager's client);
// deleting a kept one gives its room back, so the third, once updated, is
// kept. Removing the budget's wiring or its delete handler fails this.
func TestSecretCacheBudgetReachesTheCache(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	o := setup.DefaultOptions()
	o.MetricsBindAddress, o.HealthProbeBindAddress, o.SecureMetrics = "0", "0", false
	o.Webhook.Disabled = true
	o.SkipControllerNameValidation = true
	o.GitOps.CacheDir = t.TempDir()
	o.Controllers = []string{"issuer"}
	o.WatchNamespaces = []string{env.NewNamespace(t)}
	ns := o.WatchNamespaces[0]
	const each = 30 << 10
	o.SecretCacheMaxBytes = 2*each + 1024
	cv, err := setup.New(ctx, env.Config, o)
	g.Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cv.Manager.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })
	sc, ok := cv.Manager.GetCache().(*secretcache.Reader)
	g.Expect(ok).To(BeTrue())

	data := strings.Repeat("y", each)
	mk := func(name string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{secretcache.Label: "true"}},
			Data: map[string][]byte{"k": []byte(data)}}
		g.Expect(env.Client.Create(ctx, s)).To(Succeed())
		return s
	}
	cachedWhole := func(g Gomega, name string) bool {
		s := &corev1.Secret{}
		g.Expect(sc.Cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		return len(s.Data) > 0
	}
	first, second := mk("first"), mk("second")
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(cachedWhole(g, "first")).To(BeTrue())
		g.Expect(cachedWhole(g, "second")).To(BeTrue())
	}).Should(Succeed())
	third := mk("third")
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(cachedWhole(g, "third")).To(BeFalse(), "a labelled Secret past the budget was cached whole")
	}).Should(Succeed())
	g.Expect(sc.Budget.Used()).To(BeNumerically("<=", o.SecretCacheMaxBytes))
	s := &corev1.Secret{}
	g.Expect(cv.Manager.GetClient().Get(ctx, client.ObjectKeyFromObject(third), s)).To(Succeed())
	g.Expect(string(s.Data["k"])).To(Equal(data), "a Secret past the budget is still read whole")

	g.Expect(env.Client.Delete(ctx, first)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(sc.Cache.Get(ctx, client.ObjectKeyFromObject(first), &corev1.Secret{})).NotTo(Succeed())
	}).Should(Succeed())
	third.Data["k2"] = []byte("z")
	g.Expect(env.Client.Update(ctx, third)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(cachedWhole(g, "third")).To(BeTrue(), "a deletion did not give its room back")
	}).Should(Succeed())
	g.Expect(cachedWhole(g, second.Name)).To(BeTrue())
}
