package lbipam_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/lbipam"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestPoolFillReadsHoldersFromTheCache: filling a pool with n Services, one
// at a time, changes the pool n times; the pool reconciler answers each
// change from the manager's cache, so the API server counts fewer than n/4
// GETs of Services over the whole fill (the kube-apiserver's own check of
// the "kubernetes" Service, every 10 s, included; measured: 0). Reading
// every holder live on every pool change asks for up to n²/2 (at least n:
// the reconcile after the last change alone reads every holder); held to
// the controller's 20 QPS budget it measured 100 for n = 32, and the fill
// took twice as long.
func TestPoolFillReadsHoldersFromTheCache(t *testing.T) {
	testenv.Need(t, env)
	const n = 32
	g := NewWithT(t)
	ctx := t.Context()
	env.StartManager(t, func(o *setup.Options) { o.Controllers = []string{lbipam.ControllerName} })
	ns := env.NewNamespace(t)
	pool := newPool(t, "fill-"+ns, ns, "192.0.2.64/26", 0)

	before := env.APIRequests(t, []string{"services"}, "GET")
	for i := range n {
		g.Expect(env.Client.Create(ctx, service(ns, fmt.Sprintf("s%d", i), "", 80, 1))).To(Succeed())
		// One pool change at a time, as Services arrive in a cluster.
		g.Eventually(func() []lbv1alpha1.Assignment { return assignments(t, pool.Name) }).
			WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(HaveLen(i + 1))
	}
	g.Eventually(func(g Gomega) {
		p := &lbv1alpha1.IPAddressPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), p)).To(Succeed())
		g.Expect(p.Status.Assigned).To(BeEquivalentTo(n))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	// Let the pool reconciles of the last changes finish.
	time.Sleep(time.Second)
	live := env.APIRequests(t, []string{"services"}, "GET") - before
	t.Logf("filling a pool with %d Services cost %v GETs of Services on the API server", n, live)
	g.Expect(live).To(BeNumerically("<", n/4), "the pool reconciler read holders past the cache: %v GETs for %d pool changes", live, n)
	g.Expect(assignments(t, pool.Name)).To(HaveLen(n), "a holder lost its address during the fill")
}

// TestLaggingCacheKeepsAFreshHolder: a Service the cache has not seen yet
// (just created; the assignment written by a manager whose cache was
// ahead) keeps its address when the pool is reconciled: the reconciler
// confirms with the API server before releasing. A Service the cache calls
// gone and the API server agrees is gone is released, and so is one
// re-created under the same name (another UID). The cache's lag is the
// test's (a Reader hiding the Services), so the outcome does not depend on
// informer timing; the pool and Services are real.
func TestLaggingCacheKeepsAFreshHolder(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	pool := newPool(t, "lag-"+ns, ns, "192.0.2.128/29", 0)

	fresh, gone, recreated := service(ns, "fresh", "", 80, 1), service(ns, "gone", "", 80, 1), service(ns, "recreated", "", 80, 1)
	for _, s := range []*corev1.Service{fresh, gone, recreated} {
		g.Expect(env.Client.Create(ctx, s)).To(Succeed())
	}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
	for i, s := range []*corev1.Service{fresh, gone, recreated} {
		pool.Status.Assignments = append(pool.Status.Assignments, lbv1alpha1.Assignment{Address: fmt.Sprintf("192.0.2.%d", 129+i),
			Service: lbv1alpha1.ServiceRef{Namespace: ns, Name: s.Name, UID: s.UID}, Ports: []string{"TCP/80"}})
	}
	g.Expect(env.Client.Status().Update(ctx, pool)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, gone)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, recreated)).To(Succeed())
	g.Expect(env.Client.Create(ctx, service(ns, "recreated", "", 80, 1))).To(Succeed())

	cache := testenv.NewStaleClient(env.Client)
	for _, s := range []*corev1.Service{fresh, gone, recreated} {
		cache.Hide(s)
	}
	r := &lbipam.Reconciler{APIReader: env.Client, DefaultClass: true, Client: cache}
	_, err := r.ReconcilePool(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(assignments(t, pool.Name)).To(ConsistOf(And(HaveField("Service.Name", "fresh"), HaveField("Service.UID", fresh.UID),
		HaveField("Address", "192.0.2.129"))), "the pool reconciler released a holder only its cache had not seen, or kept a gone one")
}
