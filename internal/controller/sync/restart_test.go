package sync_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// startShardManager runs a second manager, with only the gitops controllers
// and a fresh artifact cache, serving the shard key; the returned stop
// cancels it and waits until it has stopped.
func startShardManager(t *testing.T, key string) (stop func()) {
	t.Helper()
	stopMgr := env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"gitrepository", "sync"}
		o.ShardKey = key
		o.GracefulShutdownTimeout = 10 * time.Second
		o.GitOps.CacheDir = t.TempDir()
		chartGitOps(o)
	})
	return func() {
		if err := stopMgr(); err != nil {
			t.Logf("shard manager stopped with: %v", err)
		}
	}
}

// TestRestartMidApplyConverges: the manager is killed while applying 60
// objects; git then drops half of them; a fresh manager (empty memory and
// artifact cache) converges to exactly the new revision: the inventory,
// written ahead of the apply, still knew every object the first manager
// may have created, so none is leaked.
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

	stop := startShardManager(t, shard)
	count := func() int {
		l := &corev1.ConfigMapList{}
		if err := env.Client.List(t.Context(), l, client.InNamespace(ns), client.MatchingLabels{gitopsv1alpha1.SyncNameLabel: "app"}); err != nil {
			return -1
		}
		return len(l.Items)
	}
	g.Eventually(count).WithTimeout(30 * time.Second).WithPolling(5 * time.Millisecond).Should(BeNumerically(">", 0))
	stop()
	created := count()
	t.Logf("killed the manager with %d of 60 objects applied", created)
	g.Expect(getSync(g, t, ns, "app").Status.Inventory).To(HaveLen(60), "the inventory is written before applying")

	// Git drops half; a new manager takes over.
	var drop []string
	for i := 30; i < 60; i++ {
		drop = append(drop, fmt.Sprintf("app/cm%02d.yaml", i))
	}
	repo.Delete(t, "drop half", drop...)
	h2 := repo.Commit(t, "rev 2", map[string]string{"app/cm00.yaml": configMap("cm00", map[string]string{"rev": "2"})})
	requestReconcile(t, gr)
	startShardManager(t, shard)
	s := waitApplied(t, g, ns, "app", h2)
	g.Expect(s.Status.Inventory).To(HaveLen(30))
	g.Expect(count()).To(Equal(30))
	expectCM(t, g, ns, "cm00", map[string]string{"rev": "2"})
	expectCM(t, g, ns, "cm29", map[string]string{"rev": "1"})
}
