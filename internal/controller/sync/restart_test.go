package sync_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// startShardManager runs a second manager, with only the gitops controllers
// and a fresh artifact cache, serving the shard key; the returned stop
// kills it: its context is cancelled with a 1 ms grace, so requests in
// flight are cut off and whatever it held in memory is lost. qps, when
// above zero, limits the Sync controller's API requests (burst 1), so that
// a test can kill it part-way through an apply.
func startShardManager(t *testing.T, key string, qps float32) (stop func()) {
	t.Helper()
	stopMgr := env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"gitrepository", "sync"}
		o.ShardKey = key
		o.GracefulShutdownTimeout = time.Millisecond
		o.GitOps.CacheDir = t.TempDir()
		if qps > 0 {
			o.KubeAPIQPS = map[string]float32{"sync": qps}
			o.KubeAPIBurst = map[string]int{"sync": 1}
		}
		chartGitOps(o)
	})
	return func() {
		if err := stopMgr(); err != nil {
			t.Logf("shard manager stopped with: %v", err)
		}
	}
}

// TestRestartMidApplyConverges: the manager is killed (1 ms grace) while
// applying 60 objects, and the test checks that the kill came mid-apply:
// some but not all objects exist, the Sync says Reconciling=Progressing and
// has applied no revision. Git then drops half of them; a fresh manager
// (empty memory and artifact cache) converges to exactly the new revision:
// the inventory, written ahead of the apply, still knew every object the
// first manager may have created, so none is leaked.
func TestRestartMidApplyConverges(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	const shard = "restart-test"
	files := map[string]string{}
	for i := range 60 {
		files[fmt.Sprintf("app/cm%02d.yaml", i)] = configMap(fmt.Sprintf("cm%02d", i), map[string]string{"rev": "1"})
	}
	repo, _, gr := setupRepoLabelled(t, ns, files, map[string]string{setup.ShardLabel: shard})
	sy := newSync(ns, "app", "app", "app", true)
	sy.Labels = map[string]string{setup.ShardLabel: shard}
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())

	// 10 requests a second: the 60 objects take several seconds to apply,
	// and the manager is killed once a few exist.
	stop := startShardManager(t, shard, 10)
	count := func() int {
		l := &corev1.ConfigMapList{}
		if err := env.Client.List(t.Context(), l, client.InNamespace(ns), client.MatchingLabels{gitopsv1alpha1.SyncNameLabel: "app"}); err != nil {
			return -1
		}
		return len(l.Items)
	}
	g.Eventually(count).WithTimeout(30 * time.Second).WithPolling(5 * time.Millisecond).Should(BeNumerically(">=", 3))
	stop()
	created := count()
	t.Logf("killed the manager with %d of 60 objects applied", created)
	g.Expect(created).To(BeNumerically("<", 60), "the kill must happen mid-apply, or this test proves nothing")
	s1 := getSync(g, t, ns, "app")
	g.Expect(s1.Status.Inventory).To(HaveLen(60), "the inventory is written before applying")
	g.Expect(s1.Status.LastAppliedRevision).To(BeEmpty(), "the first manager never finished")
	rc := meta.FindStatusCondition(s1.Status.Conditions, gitopsv1alpha1.ReconcilingCondition)
	g.Expect(rc).NotTo(BeNil())
	g.Expect(rc.Reason).To(Equal(gitopsv1alpha1.ProgressingReason))
	g.Expect(rc.Message).To(ContainSubstring("(60 new objects)"))

	// Git drops half; a new manager takes over.
	var drop []string
	for i := 30; i < 60; i++ {
		drop = append(drop, fmt.Sprintf("app/cm%02d.yaml", i))
	}
	repo.Delete(t, "drop half", drop...)
	h2 := repo.Commit(t, "rev 2", map[string]string{"app/cm00.yaml": configMap("cm00", map[string]string{"rev": "2"})})
	requestReconcile(t, gr)
	startShardManager(t, shard, 0)
	s := waitApplied(t, g, ns, "app", h2)
	g.Expect(s.Status.Inventory).To(HaveLen(30))
	g.Expect(count()).To(Equal(30))
	expectCM(t, g, ns, "cm00", map[string]string{"rev": "2"})
	expectCM(t, g, ns, "cm29", map[string]string{"rev": "1"})
}
