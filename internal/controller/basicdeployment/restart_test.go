package basicdeployment_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// startShardManager runs a second manager, with every controller, that
// serves only the objects labelled with shard (the suite's manager ignores
// them). Its stop cancels it abruptly, with a 1 ms grace period: reconciles
// in flight are cut off mid-request and every in-memory expectation is
// lost, as when the process is killed.
func startShardManager(t *testing.T, shard string) (stop func()) {
	t.Helper()
	stopMgr := env.StartManager(t, func(o *setup.Options) {
		o.ShardKey = shard
		o.GracefulShutdownTimeout = time.Millisecond
	})
	return func() {
		// A 1 ms grace period is the point: runnables are cut off.
		if err := stopMgr(); err != nil && !strings.Contains(err.Error(), "grace period") {
			t.Errorf("shard manager: %v", err)
		}
	}
}

// TestManagerKilledMidScale scales a BasicDeployment from 0 to 200 and
// kills its manager twice on the way. After each restart the controllers
// rebuild from the API alone (no expectations survive), and at no moment
// may more than replicas + maxSurge Pods exist.
func TestManagerKilledMidScale(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	rec := recordPods(t, ns)
	const shard = "restart-test"
	const replicas = 200

	stop := startShardManager(t, shard)
	d := rolling(newDeployment(ns, "big", 0), intstr.FromString("25%"), intstr.FromString("25%"))
	d.Labels = map[string]string{setup.ShardLabel: shard}
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	setReplicas(ctx, g, d, replicas)

	// Kill each manager once it has created some Pods of its own.
	seen := 0
	for range 2 {
		killAt := seen + 20
		testenv.Eventually(g, func(g Gomega) {
			seen = len(livePods(ctx, g, ns, map[string]string{"app": "big"}))
			g.Expect(seen).To(BeNumerically(">=", killAt))
		}).WithTimeout(120 * time.Second).WithPolling(5 * time.Millisecond).Should(Succeed())
		stop()
		seen = len(livePods(ctx, g, ns, map[string]string{"app": "big"}))
		t.Logf("killed the manager at %d Pods", seen)
		g.Expect(seen).To(BeNumerically("<", replicas), "killed mid-scale")
		stop = startShardManager(t, shard)
	}
	waitComplete(ctx, g, d)
	rec.caughtUp(g, replicas)
	g.Consistently(func(g Gomega) {
		g.Expect(livePods(ctx, g, ns, map[string]string{"app": "big"})).To(HaveLen(replicas))
	}).WithTimeout(2 * time.Second).Should(Succeed())
	maxLive, _, _ := rec.bounds()
	t.Logf("0 -> %d with two kills: %s", replicas, rec)
	g.Expect(maxLive).To(BeNumerically("<=", replicas+50), "never more than replicas + maxSurge (25%% of 200)")
	g.Expect(maxLive).To(Equal(replicas), "a plain scale-up creates no Pod beyond replicas")
	rss := children(ctx, g, d)
	g.Expect(rss).To(HaveLen(1), "one child for one template, whatever the restarts")
	g.Expect(rss[0].Labels).To(HaveKeyWithValue(setup.ShardLabel, shard), "the child carries the parent's shard")
}

func setReplicas(ctx context.Context, g Gomega, d *workloadsv1alpha1.BasicDeployment, n int32) {
	testenv.Eventually(g, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		d.Spec.Replicas = &n
		return env.Client.Update(ctx, d)
	}).Should(Succeed())
}
