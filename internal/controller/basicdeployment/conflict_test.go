package basicdeployment_test

import (
	"context"
	"net/http"
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

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestConflictStorm: while a rollout runs, another writer keeps updating
// the BasicDeployment and its BasicReplicaSets (full updates, so every one
// of the controllers' optimistic-lock patches may meet a conflict). The
// controllers' own patches do meet conflicts (counted, not assumed), the
// rollout still converges within its bounds, and the other writer's changes
// are kept.
//
// The conflicts are counted on the client of a manager of the test's own
// (a shard manager running the BasicDeployment and BasicReplicaSet
// controllers; the deployment, and so its children, carry its shard label,
// so the suite's manager leaves them alone), for requests to this test's
// namespace only: another test's leftovers, or the suite's manager, cannot
// add to the count. The count shows that the controllers' writes meet
// conflicts, not that the storm caused each one: a run with the storm
// writing nothing still counted 3.
func TestConflictStorm(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	const shard = "storm"
	requests, _ := env.StartCountedManager(t, func(o *setup.Options) {
		o.Controllers, o.ShardKey = []string{"basicdeployment", "basicreplicaset"}, shard
	})
	// The controllers write with PATCH (optimistic lock on the children's
	// scale, status patches) and the storm and the test with another
	// client: the PATCH 409s counted are the shard manager's, on this
	// test's objects.
	patchConflicts := func() int {
		in := testenv.WritesIn(ns)
		return requests.Count(func(q testenv.Request) bool {
			return in(q) && q.Method == http.MethodPatch && q.Code == http.StatusConflict
		})
	}
	rec := recordPods(t, ns)
	d := rolling(newDeployment(ns, "storm", 6), intstr.FromInt32(2), intstr.FromInt32(1))
	d.Labels = map[string]string{setup.ShardLabel: shard}
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
	before := patchConflicts()
	setImage(ctx, g, d, "nginx:2")
	g.Eventually(func() int { return patchConflicts() - before }).
		WithTimeout(60*time.Second).WithPolling(20*time.Millisecond).Should(BeNumerically(">", 0),
		"the controllers' own writes met a conflict during the rollout")
	waitComplete(ctx, g, d)
	stopStorm()
	wg.Wait()
	rec.caughtUp(g, 6)
	maxLive, minReady, _ := rec.bounds()
	t.Logf("storm: %d foreign writes, %d of them conflicted; the controllers met %d conflicts; %s",
		writes.Load(), conflicts.Load(), patchConflicts()-before, rec)
	g.Expect(writes.Load()).To(BeNumerically(">", 10), "the storm really wrote")
	g.Expect(maxLive).To(BeNumerically("<=", 8))
	g.Expect(minReady).To(BeNumerically(">=", 5))
	g.Expect(d.Annotations).To(HaveKey("storm.test/n"), "the other writer's change is kept")
	g.Expect(children(ctx, g, d)).To(HaveLen(2))
}
