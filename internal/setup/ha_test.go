package setup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/leaderfence"
	"github.com/converge-dev/converge/internal/replicas"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestUnsafeLeaderElectionTimingsAreRefused: timings under which the
// fence could close after another replica may take the Lease, or the
// leader would step down between two healthy renewals, are refused.
func TestUnsafeLeaderElectionTimingsAreRefused(t *testing.T) {
	for _, tt := range []struct {
		lease, renew, retry time.Duration
		want                string
	}{
		{3 * time.Second, 2 * time.Second, 500 * time.Millisecond, ""},
		{15 * time.Second, 10 * time.Second, 2 * time.Second, ""},
		{3 * time.Second, 3 * time.Second, 500 * time.Millisecond, "must exceed"},
		{3 * time.Second, 2800 * time.Millisecond, 500 * time.Millisecond, "must exceed"},
		{3 * time.Second, 2 * time.Second, 1500 * time.Millisecond, "twice"},
		{0, 2 * time.Second, 500 * time.Millisecond, "positive"},
	} {
		t.Run(fmt.Sprint(tt.lease, tt.renew, tt.retry), func(t *testing.T) {
			g := NewWithT(t)
			err := leaderfence.Timings{LeaseDuration: tt.lease, RenewDeadline: tt.renew, RetryPeriod: tt.retry}.Validate()
			if tt.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
			o := setup.DefaultOptions()
			o.LeaderElection = true
			o.LeaderElectionTimings = leaderfence.Timings{LeaseDuration: tt.lease, RenewDeadline: tt.renew, RetryPeriod: tt.retry}
			_, err = setup.New(t.Context(), &rest.Config{Host: "https://127.0.0.1:1"}, o)
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)), "setup.New must refuse them too")
		})
	}
}

// haCluster is two `converge run --leader-elect` processes serving shard
// key on Lease default/<id>-<key>, with a shared artifact directory (as a
// shared volume would be).
type haCluster struct {
	exe, dir, id, key string
	args              []string
}

func newHACluster(t *testing.T, key string) *haCluster {
	t.Helper()
	if testing.Short() && os.Getenv("CI") == "" { // CI runs them, -short or not
		t.Skip("builds and runs converge processes")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	exe, err := replicas.Build(t.Context(), root, dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &haCluster{exe: exe, dir: dir, id: "ha-" + key, key: key}
	cache := filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	// No --acme-http01-bind-address: a manager without the certificate
	// controllers must not bind it, or the second replica could not start.
	h.args = []string{"--leader-elect", "--leader-election-namespace", "default", "--leader-election-id", h.id,
		"--shard-key", key, "--controllers", "gitrepository,sync", "--webhook-port", "0",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--receiver-bind-address", "0",
		"--gitops-cache-dir", cache, "--graceful-shutdown-timeout", "5s"}
	h.args = append(h.args, testenv.EgressArgs()...)
	return h
}

func (h *haCluster) lease() string { return h.id + "-" + h.key }

func (h *haCluster) start(t *testing.T, name string) *replicas.Replica {
	t.Helper()
	r, err := replicas.Start(env.Config, h.exe, h.dir, name, h.args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(h.dir, name+".log"))
			t.Logf("%s log (tail):\n%s", name, tail(string(b), 40))
		}
	})
	return r
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

func haConfigMaps(n int, v string) map[string]string {
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("app/cm-%03d.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%03d\ndata:\n  v: %q\n", i, v)
	}
	return files
}

// TestPausedLeaderNeverWritesAfterTakeover: the leader is frozen with
// SIGSTOP in the middle of applying a revision; the other replica takes the
// Lease and finishes the revision; the frozen one, resumed with SIGCONT,
// carries on and the fence refuses its writes (the test asserts, from its
// log, that at least one was refused); it sends no write and exits because
// it lost the Lease. Without the fence its resumed workers write stale
// objects over the new leader's.
func TestPausedLeaderNeverWritesAfterTakeover(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	h := newHACluster(t, "stop")
	ns := env.NewNamespace(t)
	sa := "deployer"
	env.GrantTenant(t, ns, sa)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "app")
	const n = 150
	h1 := repo.Commit(t, "v1", haConfigMaps(n, "1"))
	labels := map[string]string{setup.ShardLabel: h.key}
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: labels},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: repo.FileURL(), Interval: &metav1.Duration{Duration: time.Hour}}}
	sy := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: labels},
		Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "app"}, Path: "app", Prune: ptr.To(true),
			ServiceAccountName: sa, RetryInterval: &metav1.Duration{Duration: 2 * time.Second}}}
	g.Expect(env.Client.Create(t.Context(), gr)).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())

	a, b := h.start(t, "a"), h.start(t, "b")
	leader, err := replicas.Leader(t.Context(), env.Client, "default", h.lease(), time.Minute, a, b)
	g.Expect(err).NotTo(HaveOccurred())
	other := b
	if leader == b {
		other = a
	}
	waitSyncRevision(t, g, ns, "app", h1)

	// A new revision: every object changes. Freeze the leader as soon as
	// it has written some of them. On a fast run the leader can finish a
	// revision between two polls: then let it go on and try again with the
	// next revision, so the run always proves something.
	var hash, v string
	var frozen time.Time
	stoppedAt := n
	for try := 2; stoppedAt == n; try++ {
		g.Expect(try).To(BeNumerically("<=", 6), "the leader finished every revision before it could be frozen; nothing left to prove")
		if try > 2 {
			g.Expect(leader.Signal(syscall.SIGCONT)).To(Succeed())
			waitSyncRevision(t, g, ns, "app", hash)
		}
		v = fmt.Sprint(try)
		hash = repo.Commit(t, "v"+v, haConfigMaps(n, v))
		p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ReconcileRequestAnnotation, time.Now().Format(time.RFC3339Nano))
		g.Expect(env.Client.Patch(t.Context(), gr, client.RawPatch("application/merge-patch+json", p))).To(Succeed())
		testenv.Eventually(g, func(g Gomega) {
			g.Expect(countValue(t, g, ns, v)).To(BeNumerically(">", 0))
		}).WithPolling(5 * time.Millisecond).Should(Succeed())
		frozen = time.Now()
		g.Expect(leader.Signal(syscall.SIGSTOP)).To(Succeed())
		stoppedAt = countValue(t, g, ns, v)
		t.Logf("leader %s frozen with %d of %d objects at v%s", leader.Name, stoppedAt, n, v)
	}
	h2 := hash

	_, err = replicas.Leader(t.Context(), env.Client, "default", h.lease(), time.Minute, other)
	g.Expect(err).NotTo(HaveOccurred())
	waitSyncRevision(t, g, ns, "app", h2)

	// The new leader now owns the state; resume the old one and watch
	// what it sends.
	resumed := time.Now()
	g.Expect(leader.Signal(syscall.SIGCONT)).To(Succeed())
	select {
	case <-leader.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the resumed replica did not step down")
	}
	// The fence must have been exercised: the resumed workers carried on
	// with the frozen revision and at least one of their writes was
	// refused. Without that, the run shows only that the resumed process
	// exited before it wrote, not that the fence stops it.
	log, err := os.ReadFile(filepath.Join(h.dir, leader.Name+".log"))
	g.Expect(err).NotTo(HaveOccurred())
	fenced := strings.Count(string(log), "write fence")
	t.Logf("fenced write attempts logged by the resumed replica: %d", fenced)
	g.Expect(fenced).To(BeNumerically(">", 0), "the fence refused no write of the resumed replica: it was not exercised")
	// Every write that reached the API server after the resume passed the
	// fence before the freeze: it was in flight (between the fence and the
	// socket) when SIGSTOP landed, which no client-side fence can prevent
	// (docs/running-in-a-cluster.md). None passed the fence after it.
	writes := leader.Proxy.Requests(resumed, replicas.ObjectWrite)
	for _, w := range writes {
		g.Expect(w.FenceChecked).NotTo(BeZero(), "%s %s reached the API server without passing the fence", w.Method, w.Path)
		g.Expect(w.FenceChecked.Before(frozen)).To(BeTrue(),
			"the resumed replica wrote after it lost the Lease: %s %s passed the fence at %s, after the freeze at %s",
			w.Method, w.Path, w.FenceChecked.Format(time.RFC3339Nano), frozen.Format(time.RFC3339Nano))
	}
	t.Logf("writes in flight at the freeze that landed after the resume: %d", len(writes))
	g.Expect(countValue(t, g, ns, v)).To(Equal(n))

	// A clean shutdown releases the Lease at once: right after the
	// process exits, it no longer holds it.
	g.Expect(other.Signal(syscall.SIGTERM)).To(Succeed())
	<-other.Exited()
	holder, err := replicas.Holder(t.Context(), env.Client, "default", h.lease())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.Holds(holder)).To(BeFalse(), "the Lease was not released on SIGTERM")
}

func countValue(t *testing.T, g Gomega, ns, v string) int {
	l := &corev1.ConfigMapList{}
	g.Expect(env.Client.List(t.Context(), l, client.InNamespace(ns))).To(Succeed())
	k := 0
	for _, cm := range l.Items {
		if cm.Data["v"] == v {
			k++
		}
	}
	return k
}

func waitSyncRevision(t *testing.T, g Gomega, ns, name, hash string) {
	t.Helper()
	testenv.Eventually(g, func(g Gomega) {
		s := &gitopsv1alpha1.Sync{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		c := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(s.Status.LastAppliedRevision).To(HaveSuffix(hash), "%s: %s", c.Reason, c.Message)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(3 * time.Minute).Should(Succeed())
}

// TestShardsElectTheirOwnLeaders: each shard key has its own Lease;
// stopping the manager that leads one shard releases that Lease and leaves
// the other shard's leader and Lease untouched.
func TestShardsElectTheirOwnLeaders(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	id := "shards"
	opts := func(key string) func(*setup.Options) {
		return func(o *setup.Options) {
			o.LeaderElection, o.LeaderElectionNamespace, o.LeaderElectionID = true, "default", id
			o.ShardKey, o.Controllers = key, []string{"sync"}
		}
	}
	stopA := env.StartManager(t, opts("a"))
	env.StartManager(t, opts("b"))
	lease := func(g Gomega, key string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: id + "-" + key}, l)).To(Succeed())
		return l
	}
	var holderA, holderB string
	testenv.Eventually(g, func(g Gomega) {
		a, b := lease(g, "a"), lease(g, "b")
		g.Expect(a.Spec.HolderIdentity).NotTo(BeNil())
		g.Expect(b.Spec.HolderIdentity).NotTo(BeNil())
		holderA, holderB = *a.Spec.HolderIdentity, *b.Spec.HolderIdentity
		g.Expect(holderA).NotTo(BeEmpty())
		g.Expect(holderB).NotTo(BeEmpty())
	}).Should(Succeed())
	g.Expect(holderA).NotTo(Equal(holderB), "one manager per shard, each with its own identity")
	before := lease(g, "b")

	g.Expect(stopA()).To(Succeed())
	g.Expect(ptr.Deref(lease(g, "a").Spec.HolderIdentity, "")).To(BeEmpty(), "the stopped shard leader released its Lease")
	testenv.Eventually(g, func(g Gomega) {
		b := lease(g, "b")
		g.Expect(b.Spec.RenewTime.After(before.Spec.RenewTime.Add(leaderfence.DefaultLeaseDuration))).To(BeTrue(), "b keeps renewing")
		g.Expect(*b.Spec.HolderIdentity).To(Equal(holderB))
		g.Expect(ptr.Deref(b.Spec.LeaseTransitions, 0)).To(Equal(ptr.Deref(before.Spec.LeaseTransitions, 0)))
	}).Should(Succeed())
}

// TestLeaderKillsDuringApplyAndPruneLoseNothing: a revision changes 150
// objects, adds 60 and removes 60; the leading process is SIGKILLed during
// the apply (twice) and during the prune, and replaced each time; the test
// asserts from the objects that at least one kill landed mid-apply and one
// mid-prune (a kill that came too late is retried, at most 3 times).
// The final set equals the revision, and no object the revision keeps is
// ever deleted (a watch sees every DELETE).
func TestLeaderKillsDuringApplyAndPruneLoseNothing(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	h := newHACluster(t, "kill")
	ns := env.NewNamespace(t)
	sa := "deployer"
	env.GrantTenant(t, ns, sa)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "app")
	const n, churn = 150, 60
	h1 := repo.Commit(t, "v1", haConfigMaps(n, "1"))
	labels := map[string]string{setup.ShardLabel: h.key}
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: labels},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: repo.FileURL(), Interval: &metav1.Duration{Duration: time.Hour}}}
	sy := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: labels},
		Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "app"}, Path: "app", Prune: ptr.To(true),
			ServiceAccountName: sa, RetryInterval: &metav1.Duration{Duration: 2 * time.Second}}}
	g.Expect(env.Client.Create(t.Context(), gr)).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	rs := []*replicas.Replica{h.start(t, "k0"), h.start(t, "k1")}
	waitSyncRevision(t, g, ns, "app", h1)

	// Revision 2: cm-000..059 removed, cm-060..149 changed, cm-150..209 new.
	files := map[string]string{}
	want := map[string]bool{}
	for i := churn; i < n+churn; i++ {
		name := fmt.Sprintf("cm-%03d", i)
		files["app/"+name+".yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  v: \"2\"\n", name)
		want[name] = true
	}
	var removed []string
	for i := range churn {
		removed = append(removed, fmt.Sprintf("app/cm-%03d.yaml", i))
	}
	repo.Delete(t, "drop", removed...)
	h2 := repo.Commit(t, "v2", files)

	w, err := env.Clientset.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	deleted := make(chan string, 1000)
	go func() {
		defer close(deleted)
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == "DELETED" {
				deleted <- cm.Name
			}
		}
	}()
	p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ReconcileRequestAnnotation, time.Now().Format(time.RFC3339Nano))
	g.Expect(env.Client.Patch(t.Context(), gr, client.RawPatch("application/merge-patch+json", p))).To(Succeed())

	gone := func() int { // removed objects already pruned
		l := &corev1.ConfigMapList{}
		g.Expect(env.Client.List(t.Context(), l, client.InNamespace(ns))).To(Succeed())
		k := churn
		for _, cm := range l.Items {
			if !want[cm.Name] && strings.HasPrefix(cm.Name, "cm-") {
				k--
			}
		}
		return k
	}
	// Each kill must land inside its phase, shown by the objects: the
	// phase has made progress since the previous kill (so the leader being
	// killed is at work in it), and right after the process is gone the
	// phase is still unfinished (the revision's objects are not all at v2,
	// or not all removed ones pruned). No other replica writes in between:
	// the killed leader's Lease has to expire first. A kill that came too
	// late for its phase is tried again, a bounded number of times; the
	// test fails unless at least one kill landed mid-apply and one
	// mid-prune.
	progress := map[string]func() int{"apply": func() int { return countValue(t, g, ns, "2") }, "prune": gone}
	total := map[string]int{"apply": n, "prune": churn}
	landed := map[string]int{}
	kills := 0
	killIn := func(phase string) {
		before := progress[phase]()
		testenv.Eventually(g, func(g Gomega) {
			p := progress[phase]()
			g.Expect(p > before || p == total[phase]).To(BeTrue(), "no progress in the %s since the last kill", phase)
		}).WithPolling(5 * time.Millisecond).WithTimeout(3 * time.Minute).Should(Succeed())
		leader, err := replicas.Leader(t.Context(), env.Client, "default", h.lease(), time.Minute, rs...)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(leader.Signal(syscall.SIGKILL)).To(Succeed())
		<-leader.Exited()
		after := progress[phase]()
		kills++
		in := after < total[phase]
		if in {
			landed[phase]++
		}
		t.Logf("kill %d (%s) of %s: %d objects at v2, %d of %d pruned; mid-%s: %v", kills, phase, leader.Name, countValue(t, g, ns, "2"), gone(), churn, phase, in)
		for j, r := range rs {
			if r == leader {
				rs[j] = h.start(t, fmt.Sprintf("k%d", kills+1))
			}
		}
	}
	for _, phase := range []string{"apply", "apply", "prune"} {
		if progress[phase]() < total[phase] {
			killIn(phase)
		}
	}
	for _, phase := range []string{"apply", "prune"} {
		for try := 0; landed[phase] == 0 && progress[phase]() < total[phase] && try < 3; try++ {
			killIn(phase)
		}
	}
	g.Expect(landed["apply"]).To(BeNumerically(">", 0), "no kill landed while an apply was in progress")
	g.Expect(landed["prune"]).To(BeNumerically(">", 0), "no kill landed while a prune was in progress")
	waitSyncRevision(t, g, ns, "app", h2)
	l := &corev1.ConfigMapList{}
	g.Expect(env.Client.List(t.Context(), l, client.InNamespace(ns))).To(Succeed())
	got := map[string]bool{}
	for _, cm := range l.Items {
		if strings.HasPrefix(cm.Name, "cm-") {
			got[cm.Name] = true
			g.Expect(cm.Data["v"]).To(Equal("2"), cm.Name)
		}
	}
	g.Expect(got).To(Equal(want), "the final set is the revision")
	time.Sleep(time.Second) // let the watch deliver the last events
	w.Stop()
	for name := range deleted {
		g.Expect(want[name]).To(BeFalse(), "%s, which the revision keeps, was deleted", name)
	}
}
