package basicdeployment_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestConflictStorm: while a rollout runs, another writer keeps updating
// the BasicDeployment and its BasicReplicaSets (full updates, so every one
// of the controllers' optimistic-lock patches may meet a conflict). The
// controllers' own patches do meet conflicts (counted, not assumed), the
// rollout still converges within its bounds, and the other writer's changes
// are kept.
//
// Not parallel, on purpose: the conflicts are counted from a process-wide
// counter (client-go's), so the test takes its deltas while it is the only
// test of this process running. A sequential top-level test never overlaps
// another: the parallel ones wait until every sequential one has returned,
// and the sequential ones run one by one. The count shows that the
// controllers' writes meet conflicts, not that the storm caused each one:
// a run with the storm writing nothing still counted 3.
func TestConflictStorm(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	rec := recordPods(t, ns)
	d := rolling(newDeployment(ns, "storm", 6), intstr.FromInt32(2), intstr.FromInt32(1))
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitComplete(ctx, g, d)
	rec.caughtUp(g, 6)
	rec.arm()

	stormCtx, stopStorm := context.WithCancel(ctx)
	var writes, conflicts atomic.Int64
	var wg sync.WaitGroup
	touch := func(obj client.Object, i int) {
		if err := env.Client.Get(stormCtx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return
		}
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["storm.test/n"] = strconv.Itoa(i)
		obj.SetAnnotations(ann)
		switch err := env.Client.Update(stormCtx, obj); {
		case err == nil:
			writes.Add(1)
		case apierrors.IsConflict(err):
			conflicts.Add(1)
		}
	}
	wg.Go(func() {
		for i := 0; stormCtx.Err() == nil; i++ {
			touch(&workloadsv1alpha1.BasicDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "storm"}}, i)
		}
	})
	wg.Go(func() {
		for i := 0; stormCtx.Err() == nil; i++ {
			list := &workloadsv1alpha1.BasicReplicaSetList{}
			if env.Client.List(stormCtx, list, client.InNamespace(ns)) != nil {
				continue
			}
			for j := range list.Items {
				touch(&list.Items[j], i)
			}
		}
	})
	// The controllers write with PATCH (optimistic lock on the children's
	// scale, status patches); the storm and the test write with PUT, so the
	// PATCH 409s client-go counts in this process are the controllers', and,
	// no other test running, the ones counted from here on are met on this
	// test's objects.
	before := patchConflicts(g)
	setImage(ctx, g, d, "nginx:2")
	g.Eventually(func() float64 { return patchConflicts(g) - before }).
		WithTimeout(60*time.Second).WithPolling(20*time.Millisecond).Should(BeNumerically(">", 0),
		"the controllers' own writes met a conflict during the rollout")
	waitComplete(ctx, g, d)
	stopStorm()
	wg.Wait()
	rec.caughtUp(g, 6)
	maxLive, minReady, _ := rec.bounds()
	t.Logf("storm: %d foreign writes, %d of them conflicted; the controllers met %.0f conflicts; %s",
		writes.Load(), conflicts.Load(), patchConflicts(g)-before, rec)
	g.Expect(writes.Load()).To(BeNumerically(">", 10), "the storm really wrote")
	g.Expect(maxLive).To(BeNumerically("<=", 8))
	g.Expect(minReady).To(BeNumerically(">=", 5))
	g.Expect(d.Annotations).To(HaveKey("storm.test/n"), "the other writer's change is kept")
	g.Expect(children(ctx, g, d)).To(HaveLen(2))
}

// patchConflicts is how many PATCH requests of this process the API server
// answered with 409 Conflict (client-go's rest_client_requests_total, as
// controller-runtime registers it).
func patchConflicts(g Gomega) float64 {
	mfs, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "rest_client_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var code, method string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "code":
					code = l.GetValue()
				case "method":
					method = l.GetValue()
				}
			}
			if code == "409" && method == "PATCH" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
