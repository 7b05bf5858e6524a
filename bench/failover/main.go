// Command failover measures leader hand-over with two real `converge run
// --leader-elect` processes on a local control plane (internal/testenv;
// each replica behind its own counting proxy, internal/replicas) serving a
// Sync of N ConfigMaps. For K SIGKILLs and T SIGTERMs of whichever replica
// leads, it edits one of the Sync's ConfigMaps right after the signal and
// measures from the signal to (a) the Lease held by the other replica and
// (b) the edit undone; the killed replica is restarted and given time to
// warm up before the next round. It also reports the API requests per
// second that leader election costs each replica (leader and standby),
// counted at their proxies. It prints figures and asserts nothing.
//
// Run it from the repository root (after `make tools`):
//
//	go run ./bench/failover
//	go run ./bench/failover -objects 1000 -kills 5 -terms 5
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/internal/replicas"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	nObjects = flag.Int("objects", 1000, "ConfigMaps of the Sync")
	nKills   = flag.Int("kills", 5, "SIGKILLs of the leader")
	nTerms   = flag.Int("terms", 5, "SIGTERMs of the leader")
	settle   = flag.Duration("settle", 6*time.Second, "time a restarted replica gets to warm up before the next round")
	idle     = flag.Duration("idle", 10*time.Second, "window in which leader-election requests are counted")
	shared   = flag.Bool("shared-cache", false, "give the replicas one --gitops-cache-dir (a shared volume); by default each fetches for itself, as Pods with their own disk do")
)

const (
	shardKey = "failover"
	leaseID  = "converge-failover"
	leaseNS  = "default"
)

func step(s string) { fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), s) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/failover:", err)
	os.Exit(1)
}

func main() {
	flag.Parse()
	ctx := context.Background()
	root := must(os.MkdirTemp("", "bench-failover-"))
	defer os.RemoveAll(root)
	step("building converge")
	exe := must(replicas.Build(ctx, ".", root))
	step("starting the control plane")
	env, err := testenv.Start(ctx, testenv.Options{Manager: func(o *setup.Options) {
		o.GitOps.Lockdown = false // the Sync acts as the manager, as under `converge up`
	}})
	if err != nil {
		fail(err)
	}
	defer func() { _ = env.Stop() }()
	c := env.Client

	ns := "failover"
	must(0, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	url := repo(root, *nObjects)
	labels := map[string]string{setup.ShardLabel: shardKey}
	must(0, c.Create(ctx, &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: labels},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: url, Interval: &metav1.Duration{Duration: time.Hour}}}))
	// No targetNamespace: the ConfigMaps carry no namespace and land in
	// the Sync's.
	must(0, c.Create(ctx, &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: labels},
		Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "app"}, Path: "app", Prune: ptr.To(true),
			RetryInterval: &metav1.Duration{Duration: 2 * time.Second}}}))

	cache := filepath.Join(root, "artifacts")
	must(0, os.MkdirAll(cache, 0o700))
	args := []string{"--leader-elect", "--leader-election-namespace", leaseNS, "--leader-election-id", leaseID,
		"--shard-key", shardKey, "--controllers", "gitrepository,sync", "--webhook-port", "0",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--receiver-bind-address", "0",
		"--gitops-lockdown=false"}
	args = append(args, testenv.EgressArgs()...)
	if *shared {
		args = append(args, "--gitops-cache-dir", cache)
	}
	lease := leaseID + "-" + shardKey
	n := 0
	start := func() *replicas.Replica {
		n++
		r, err := replicas.Start(env.Config, exe, root, fmt.Sprintf("replica-%d", n), args...)
		if err != nil {
			fail(err)
		}
		return r
	}
	rs := []*replicas.Replica{start(), start()}
	defer func() {
		for _, r := range rs {
			_ = r.Stop()
		}
	}()
	step(fmt.Sprintf("waiting for the Sync of %d objects to be Ready", *nObjects))
	t0 := time.Now()
	waitReady(ctx, c, ns)
	step(fmt.Sprintf("Ready after %s", time.Since(t0).Round(time.Millisecond)))

	// Leader-election cost per replica, while nothing else happens.
	leader := must(replicas.Leader(ctx, c, leaseNS, lease, time.Minute, rs...))
	from := time.Now()
	time.Sleep(*idle)
	for _, r := range rs {
		k := len(r.Proxy.Requests(from, func(q replicas.Request) bool { return q.IsLease() }))
		role := "standby"
		if r == leader {
			role = "leader"
		}
		benchout.Line("failover.lease_requests_per_s_"+role, float64(k)/idle.Seconds(), "req/s")
	}

	var kill, term [2][]time.Duration
	rounds := *nKills + *nTerms
	for i := range rounds {
		sig, name := syscall.SIGKILL, "SIGKILL"
		if i >= *nKills {
			sig, name = syscall.SIGTERM, "SIGTERM"
		}
		leader := must(replicas.Leader(ctx, c, leaseNS, lease, time.Minute, rs...))
		other := rs[0]
		if other == leader {
			other = rs[1]
		}
		cm := fmt.Sprintf("cm-%04d", (i*37)%*nObjects)
		sent := time.Now()
		must(0, leader.Signal(sig))
		patch := client.RawPatch("application/merge-patch+json", []byte(`{"data":{"v":"drift"}}`))
		must(0, c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cm}}, patch, client.FieldOwner("kubectl-edit")))
		var handed, undone time.Duration
		deadline := sent.Add(2 * time.Minute)
		for (handed == 0 || undone == 0) && time.Now().Before(deadline) {
			if handed == 0 {
				if h, err := replicas.Holder(ctx, c, leaseNS, lease); err == nil && other.Holds(h) {
					handed = time.Since(sent)
				}
			}
			if undone == 0 {
				got := &corev1.ConfigMap{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cm}, got); err == nil && got.Data["v"] == "1" {
					undone = time.Since(sent)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if handed == 0 || undone == 0 {
			fail(fmt.Errorf("round %d (%s): no hand-over (%s) or drift not undone (%s) within 2 minutes", i+1, name, handed, undone))
		}
		writes := len(other.Proxy.Requests(sent, func(q replicas.Request) bool {
			return replicas.ObjectWrite(q) && !q.Time.After(sent.Add(undone))
		}))
		step(fmt.Sprintf("round %d: %s to %s: Lease handed over after %s, edit undone after %s (the new leader's writes until then: %d)",
			i+1, name, leader.Name, handed.Round(time.Millisecond), undone.Round(time.Millisecond), writes))
		if sig == syscall.SIGKILL {
			kill[0], kill[1] = append(kill[0], handed), append(kill[1], undone)
		} else {
			term[0], term[1] = append(term[0], handed), append(term[1], undone)
		}
		<-leader.Exited()
		_ = leader.Stop()
		rs = slices.DeleteFunc(rs, func(r *replicas.Replica) bool { return r == leader })
		rs = append(rs, start())
		time.Sleep(*settle)
	}
	report("sigkill", kill)
	report("sigterm", term)
	fmt.Fprintf(os.Stderr, "load average: %s", must(os.ReadFile("/proc/loadavg")))
}

// report prints min/median/max of the hand-over and of the drift undone;
// the median undone is also given as a ratio to the median hand-over (the
// Lease's own floor).
func report(name string, d [2][]time.Duration) {
	if len(d[0]) == 0 {
		return
	}
	for j, what := range []string{"lease_handover", "drift_undone"} {
		s := slices.Clone(d[j])
		slices.Sort(s)
		med := s[len(s)/2]
		benchout.Line(fmt.Sprintf("failover.%s_%s_min", name, what), s[0].Seconds(), "s")
		if what == "drift_undone" {
			lease := slices.Clone(d[0])
			slices.Sort(lease)
			benchout.Ratio(fmt.Sprintf("failover.%s_%s_median", name, what), med.Seconds(), "s", med.Seconds()/lease[len(lease)/2].Seconds())
		} else {
			benchout.Line(fmt.Sprintf("failover.%s_%s_median", name, what), med.Seconds(), "s")
		}
		benchout.Line(fmt.Sprintf("failover.%s_%s_max", name, what), s[len(s)-1].Seconds(), "s")
	}
}

func waitReady(ctx context.Context, c client.Client, ns string) {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		s := &gitopsv1alpha1.Sync{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, s); err == nil {
			if cond := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReadyCondition); cond != nil &&
				cond.Status == metav1.ConditionTrue && s.Status.LastAppliedRevision != "" {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	fail(fmt.Errorf("the Sync was not Ready within 10 minutes"))
}

// repo commits n ConfigMaps (without a namespace) under app/ and returns
// the bare repository's file URL.
func repo(root string, n int) string {
	work := filepath.Join(root, "work")
	var buf bytes.Buffer
	for i := range n {
		fmt.Fprintf(&buf, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%04d\ndata:\n  v: \"1\"\n", i)
	}
	must(0, os.MkdirAll(filepath.Join(work, "app"), 0o755))
	must(0, os.WriteFile(filepath.Join(work, "app", "objects.yaml"), buf.Bytes(), 0o644))
	bare := filepath.Join(root, "app.git")
	git(work, "init", "-q", "-b", "main")
	git(work, "add", "-A")
	git(work, "commit", "-q", "-m", "objects")
	git(root, "clone", "-q", "--bare", work, bare)
	return "file://" + bare
}

func git(dir string, args ...string) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=b@example.com",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=b@example.com")
	if out, err := cmd.CombinedOutput(); err != nil {
		fail(fmt.Errorf("git %v: %w: %s", args, err, out))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		fail(err)
	}
	return v
}
