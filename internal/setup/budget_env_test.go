package setup_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/useragent"
)

// newUnstartedManager builds (without starting) a manager against the suite's
// API server with the given controllers and budgets. Uncached reads and
// writes work without starting it.
func newUnstartedManager(t *testing.T, controllers []string, qps map[string]float32, burst map[string]int) *setup.Converge {
	t.Helper()
	o := setup.DefaultOptions()
	o.MetricsBindAddress, o.HealthProbeBindAddress, o.SecureMetrics = "0", "0", false
	o.Webhook.Disabled = true
	o.SkipControllerNameValidation = true
	o.GitOps.CacheDir = t.TempDir()
	o.Controllers = controllers
	o.KubeAPIQPS, o.KubeAPIBurst = qps, burst
	cv, err := setup.New(t.Context(), env.Config, o)
	if err != nil {
		t.Fatalf("building a manager: %v", err)
	}
	return cv
}

// TestControllersHaveTheirOwnBudget: each controller's requests draw on
// its own token bucket. Draining the Sync controller's budget leaves the
// BasicReplicaSet controller's untouched, and a client built from a copy of
// the Sync controller's config (as its impersonating clients are) draws on
// the Sync budget.
func TestControllersHaveTheirOwnBudget(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	// 0.001 QPS: a spent token comes back after 1000 s, i.e. never here.
	cv := newUnstartedManager(t, []string{"sync", "basicreplicaset"},
		map[string]float32{"sync": 0.001, "basicreplicaset": 0.001}, map[string]int{"sync": 3, "basicreplicaset": 20})
	syncAPI, rsAPI := cv.APIs["sync"], cv.APIs["basicreplicaset"]
	g.Expect(syncAPI).NotTo(BeNil())
	g.Expect(rsAPI).NotTo(BeNil())
	g.Expect(syncAPI.Config.RateLimiter).NotTo(BeIdenticalTo(rsAPI.Config.RateLimiter), "one token bucket per controller")

	// A deadline far shorter than the refill time: a request that needs a
	// token that is not there fails at once.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	get := func(r client.Reader) error {
		return r.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{})
	}

	// Two of the Sync controller's three tokens: its API reader...
	g.Expect(get(syncAPI.APIReader)).To(Succeed())
	g.Expect(get(syncAPI.APIReader)).To(Succeed())
	// ...and the third through an impersonating client derived as the Sync
	// controller derives them (rest.CopyConfig of its config).
	imp := rest.CopyConfig(syncAPI.Config)
	imp.Impersonate = rest.ImpersonationConfig{UserName: "budget-test", Groups: []string{"system:masters"}}
	ic, err := client.New(imp, client.Options{Scheme: setup.Scheme(), Mapper: cv.Manager.GetRESTMapper()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(get(ic)).To(Succeed())

	// The Sync budget is spent, for both clients.
	g.Expect(syncAPI.Config.RateLimiter.TryAccept()).To(BeFalse(), "the impersonating client spent the Sync budget")
	err = get(syncAPI.APIReader)
	g.Expect(err).To(MatchError(ContainSubstring("would exceed context deadline")))
	err = get(ic)
	g.Expect(err).To(MatchError(ContainSubstring("would exceed context deadline")))

	// The BasicReplicaSet controller is not held back: ten requests, cached
	// client writes and uncached reads, all served from its own bucket.
	ns := env.NewNamespace(t)
	for i := range 5 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-" + string(rune('a'+i))}}
		g.Expect(rsAPI.Client.Create(ctx, cm)).To(Succeed())
		g.Expect(get(rsAPI.APIReader)).To(Succeed())
	}
	g.Expect(rsAPI.Config.RateLimiter.TryAccept()).To(BeTrue(), "10 of 20 tokens spent")
}

// TestControllerUserAgentReachesTheAPIServer: every controller's requests
// carry a User-Agent naming it. The API server records a User-Agent's
// first part as the field manager of a write that names none, so the
// managedFields of such a write show which controller made it.
func TestControllerUserAgentReachesTheAPIServer(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	cv := newUnstartedManager(t, []string{"*"}, nil, nil)
	g.Expect(cv.APIs).To(HaveLen(len(setup.ControllerNames())))
	ns := env.NewNamespace(t)
	for name, api := range cv.APIs {
		g.Expect(api.Config.UserAgent).To(HavePrefix("converge-" + name + "/"))
		g.Expect(api.Budget).To(Equal(setup.DefaultBudget(name)))
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ua-" + name}, Data: map[string]string{"k": "v"}}
		g.Expect(api.Client.Create(t.Context(), cm)).To(Succeed())
		got := &corev1.ConfigMap{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(cm), got)).To(Succeed())
		g.Expect(got.ManagedFields).NotTo(BeEmpty())
		g.Expect(got.ManagedFields[0].Manager).To(Equal("converge-"+name), "the API server saw the controller's User-Agent")
	}
}

// TestUnknownBudgetNameIsRefused: a budget for a controller that does not
// exist is an error naming the flag.
func TestUnknownBudgetNameIsRefused(t *testing.T) {
	g := NewWithT(t)
	o := setup.DefaultOptions()
	o.KubeAPIQPS = map[string]float32{"deployment": 5}
	_, err := setup.New(t.Context(), &rest.Config{Host: "https://127.0.0.1:1"}, o)
	g.Expect(err).To(MatchError(ContainSubstring(`--kube-api-qps: unknown controller "deployment"`)))
}

// fieldManagers records, per User-Agent product (converge-<controller>),
// the fieldManager query parameter of each write.
type fieldManagers struct {
	mu  sync.Mutex
	got map[string][]string
}

func (f *fieldManagers) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			product, _, _ := strings.Cut(req.Header.Get("User-Agent"), "/")
			f.mu.Lock()
			f.got[product] = append(f.got[product], req.Method+" fieldManager="+req.URL.Query().Get("fieldManager"))
			f.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestControllerWritesNameTheirFieldOwner: every write of a controller's
// client names the controller as its field manager, also a write that
// names none itself (the kit's status and finalizer patches). The API
// server would fall back to the User-Agent, which says the same, so what
// the server records cannot tell whether the client named it: the request
// on the wire can. Without client.WithFieldOwner in newControllerAPI the
// writes carry no fieldManager and this fails.
func TestControllerWritesNameTheirFieldOwner(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	rec := &fieldManagers{got: map[string][]string{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = rec.wrap
	o := setup.DefaultOptions()
	o.MetricsBindAddress, o.HealthProbeBindAddress, o.SecureMetrics = "0", "0", false
	o.Webhook.Disabled = true
	o.SkipControllerNameValidation = true
	o.GitOps.CacheDir = t.TempDir()
	cv, err := setup.New(t.Context(), cfg, o)
	g.Expect(err).NotTo(HaveOccurred())
	ns := env.NewNamespace(t)
	for name, api := range cv.APIs {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fo-" + name}}
		g.Expect(api.Client.Create(t.Context(), cm)).To(Succeed())
		p := client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"v"}}`))
		g.Expect(api.Client.Patch(t.Context(), cm, p)).To(Succeed())
		empty := client.RawPatch(types.MergePatchType, []byte(`{}`))
		g.Expect(api.Client.Status().Patch(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, empty)).To(Succeed())
		want := "fieldManager=" + useragent.FieldOwner(name)
		rec.mu.Lock()
		got := rec.got["converge-"+name]
		rec.mu.Unlock()
		g.Expect(got).To(Equal([]string{"POST " + want, "PATCH " + want, "PATCH " + want}), "controller %s", name)
	}
}
