// Command fairness measures whether one busy controller slows the others
// down. On one local control plane (kube-controller-manager, scheduler, one
// kwok node; the manager with every controller in this process) and one
// PostgreSQL server (internal/sqltest), it times:
//
//   - a BasicDeployment scaled 0 -> N (-replicas, 100): from the scale
//     patch until N Pods are available;
//   - a Database created on a PostgresInstance: from create to Ready;
//     and its floor: the same SQL and API writes without the controller
//     (see floor), so that what the load does to PostgreSQL and the API
//     server on a small machine is told from what the controller adds;
//
// first on an idle manager, then while one Sync applies M ConfigMaps
// (-objects, 5000), and prints each one's busy time against its idle time
// (target <= 1.2x). The Sync's own time is printed too. It prints figures
// and asserts nothing. From the repository root, after `make tools` (and
// with PostgreSQL installed, as for the sql test suites):
//
//	go run ./bench/fairness -objects 5000 -replicas 100 -runs 1
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

func main() {
	objects := flag.Int("objects", 5000, "ConfigMaps the busy Sync applies")
	replicas := flag.Int("replicas", 100, "Pods the BasicDeployment scales to")
	runs := flag.Int("runs", 1, "idle and busy runs (medians are printed)")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *objects, int32(*replicas), *runs) //nolint:gosec // a flag
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fairness:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

type bench struct {
	ctx  context.Context
	c    client.Client
	root string
	seq  atomic.Int64 // names; the busy phase's goroutines share it
	// The floor's own connection to the PostgreSQL server, as the
	// controller's: TLS Require, a warm admin pool.
	pg    *sqltest.Server
	pools *sqlengine.Pools
}

func run(ctx context.Context, objects int, replicas int32, runs int) error {
	logf("starting PostgreSQL")
	srv, err := sqltest.StartPostgres(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop() }()
	logf("starting the control plane (kube-controller-manager, scheduler, 1 kwok node) and the manager")
	env, err := testenv.Start(ctx, testenv.Options{ControllerManager: true, Scheduler: true, Nodes: 1, Manager: func(o *setup.Options) {
		o.GitOps.Lockdown = false // the Sync acts as the manager, as under `converge up` and in bench/gitops
	}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	root, err := os.MkdirTemp("", "bench-fairness-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(root) }()
	pools := &sqlengine.Pools{}
	defer pools.Close()
	b := &bench{ctx: ctx, c: env.Client, root: root, pg: srv, pools: pools}

	// The PostgresInstance every Database uses.
	if err := b.namespace("sql"); err != nil {
		return err
	}
	if err := b.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "sql", Name: "admin"},
		StringData: map[string]string{"username": srv.AdminUser, "password": srv.AdminPassword}}); err != nil {
		return err
	}
	if err := b.c.Create(ctx, &sqlv1alpha1.PostgresInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "sql", Name: "pg"},
		Spec: sqlv1alpha1.InstanceSpec{Host: srv.Host, Port: int32(srv.Port), AdminSecretRef: sqlv1alpha1.SecretReference{Name: "admin"}}}); err != nil { //nolint:gosec // a loopback port
		return err
	}
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		i := &sqlv1alpha1.PostgresInstance{}
		err := b.c.Get(ctx, client.ObjectKey{Namespace: "sql", Name: "pg"}, i)
		return err == nil && i.Status.Ready, nil
	}); err != nil {
		return fmt.Errorf("PostgresInstance: %w", err)
	}
	if _, err := b.floor(); err != nil { // warms the floor's admin pool
		return fmt.Errorf("the floor: %w", err)
	}
	url, err := b.repo(objects)
	if err != nil {
		return err
	}

	var idleBD, idleDB, busyBD, busyDB, idleSync, busySync, idleFloor, busyFloor []time.Duration
	for r := range runs {
		logf("run %d: idle: BasicDeployment 0 -> %d", r+1, replicas)
		d, err := b.scale(replicas)
		if err != nil {
			return err
		}
		idleBD = append(idleBD, d)
		logf("run %d: idle: Database", r+1)
		if d, err = b.database(); err != nil {
			return err
		}
		idleDB = append(idleDB, d)
		if d, err = b.floor(); err != nil {
			return err
		}
		idleFloor = append(idleFloor, d)
		logf("run %d: idle: Sync of %d ConfigMaps", r+1, objects)
		if d, err = b.sync(url, nil); err != nil {
			return err
		}
		idleSync = append(idleSync, d)

		logf("run %d: busy: BasicDeployment and Database while a Sync applies %d ConfigMaps", r+1, objects)
		type result struct {
			d   time.Duration
			err error
		}
		bd, db := make(chan result, 1), make(chan result, 1)
		d, err = b.sync(url, func() {
			go func() { d, err := b.scale(replicas); bd <- result{d, err} }()
			go func() {
				// The Database, then its floor, one after the other (not
				// competing with each other), both while the Sync runs.
				d, err := b.database()
				if err == nil {
					var f time.Duration
					f, err = b.floor()
					busyFloor = append(busyFloor, f)
				}
				db <- result{d, err}
			}()
		})
		if err != nil {
			return err
		}
		busySync = append(busySync, d)
		rbd, rdb := <-bd, <-db
		if rbd.err != nil {
			return rbd.err
		}
		if rdb.err != nil {
			return rdb.err
		}
		busyBD, busyDB = append(busyBD, rbd.d), append(busyDB, rdb.d)
		if rbd.d > d || rdb.d > d {
			logf("note: the Sync finished before the others (%v); their busy times are partly idle", d.Round(time.Millisecond))
		}
	}

	fmt.Printf("bench/fairness: median of %d run(s); busy = while one Sync applies %d ConfigMaps (target <= 1.2x idle)\n", runs, objects)
	row := func(label string, idle, busy []time.Duration) float64 {
		i, bz := median(idle), median(busy)
		ratio := bz.Seconds() / i.Seconds()
		fmt.Printf("  %-40s idle %8.2fs   busy %8.2fs   %.2fx\n", label, i.Seconds(), bz.Seconds(), ratio)
		return ratio
	}
	rBD := row(fmt.Sprintf("BasicDeployment 0 -> %d available", replicas), idleBD, busyBD)
	rDB := row("Database create -> Ready", idleDB, busyDB)
	rF := row("  its floor: the same SQL and API writes", idleFloor, busyFloor)
	rS := row(fmt.Sprintf("Sync of %d ConfigMaps (the busy one)", objects), idleSync, busySync)
	fmt.Printf("  %-40s %.2fx (the Database's busy/idle ratio over its floor's: what the controller adds to what the load does to the same work)\n",
		"Database against its floor", rDB/rF)
	benchout.Ratio(fmt.Sprintf("fairness.basicdeployment_0_to_%d_busy_vs_idle", replicas), median(busyBD).Seconds(), "s", rBD)
	benchout.Ratio("fairness.database_ready_busy_vs_idle", median(busyDB).Seconds(), "s", rDB)
	benchout.Ratio("fairness.database_floor_busy_vs_idle", median(busyFloor).Seconds(), "s", rF)
	benchout.Ratio("fairness.database_vs_floor_busy_vs_idle", median(busyDB).Seconds(), "s", rDB/rF)
	benchout.Ratio(fmt.Sprintf("fairness.sync_%d_with_others_vs_alone", objects), median(busySync).Seconds(), "s", rS)
	return nil
}

func (b *bench) namespace(name string) error {
	return b.c.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func (b *bench) next(prefix string) (string, error) {
	ns := prefix + "-" + strconv.FormatInt(b.seq.Add(1), 10)
	return ns, b.namespace(ns)
}

// scale creates a BasicDeployment at 0 replicas, waits until it is
// observed, and times scaling it to n until n Pods are available.
func (b *bench) scale(n int32) (time.Duration, error) {
	ns, err := b.next("bd")
	if err != nil {
		return 0, err
	}
	d := &workloadsv1alpha1.BasicDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: workloadsv1alpha1.BasicDeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27"}}}},
		},
	}
	if err := b.c.Create(b.ctx, d); err != nil {
		return 0, err
	}
	if err := waitFor(b.ctx, 5*time.Minute, func() (bool, error) {
		err := b.c.Get(b.ctx, client.ObjectKeyFromObject(d), d)
		return err == nil && d.Status.ObservedGeneration >= d.Generation, err
	}); err != nil {
		return 0, fmt.Errorf("BasicDeployment at 0: %w", err)
	}
	start := time.Now()
	base := d.DeepCopy()
	d.Spec.Replicas = ptr.To(n)
	if err := b.c.Patch(b.ctx, d, client.MergeFrom(base)); err != nil {
		return 0, err
	}
	if err := waitFor(b.ctx, 10*time.Minute, func() (bool, error) {
		err := b.c.Get(b.ctx, client.ObjectKeyFromObject(d), d)
		st := d.Status
		return err == nil && st.ObservedGeneration >= d.Generation && st.AvailableReplicas == n && st.Replicas == n, err
	}); err != nil {
		return 0, fmt.Errorf("BasicDeployment 0 -> %d: %w", n, err)
	}
	return time.Since(start), nil
}

// database times one Database from create to Ready.
func (b *bench) database() (time.Duration, error) {
	n := strconv.FormatInt(b.seq.Add(1), 10)
	name := "fair-" + n
	d := &sqlv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "sql", Name: name},
		Spec: sqlv1alpha1.DatabaseSpec{
			InstanceRef:  sqlv1alpha1.InstanceReference{APIVersion: sqlv1alpha1.GroupVersion.String(), Kind: "PostgresInstance", Name: "pg"},
			DatabaseName: "fair_" + n,
		}}
	start := time.Now()
	if err := b.c.Create(b.ctx, d); err != nil {
		return 0, err
	}
	if err := waitFor(b.ctx, 5*time.Minute, func() (bool, error) {
		err := b.c.Get(b.ctx, client.ObjectKeyFromObject(d), d)
		return err == nil && meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.ReadyCondition), err
	}); err != nil {
		return 0, fmt.Errorf("waiting for the Database to be Ready: %w", err)
	}
	return time.Since(start), nil
}

// floor does a new Database's work without its controller, timed: the
// sqlengine calls the Database controller makes for a new database on the
// same server with the same TLS mode (ownership reads, role, database,
// extensions, grants, a login as the owner on a fresh connection, the
// observation), then the API writes it makes (an object created, a
// finalizer patch, a Secret created, a status-sized patch) by this
// benchmark's plain client. Its busy/idle ratio is what the machine's load
// alone does to that work; what the Database takes beyond it is the
// controller's (queue, watch, budget).
func (b *bench) floor() (time.Duration, error) {
	ctx := b.ctx
	n := strconv.FormatInt(b.seq.Add(1), 10)
	name := "floor_" + n
	admin := b.pg.Admin()
	admin.TLSMode, admin.CAPEM = sqlengine.TLSRequire, nil // as the bench's PostgresInstance (no spec.tls)
	password := fmt.Sprintf("floor-%s-%d", n, time.Now().UnixNano())
	claim := sqlengine.Claim{UID: "floor-" + n, Namespace: "sql", Name: name}
	sp := sqlengine.Spec{Name: name, Owner: name, Claim: claim}
	start := time.Now()
	srv, err := b.pools.Admin(admin)
	if err != nil {
		return 0, err
	}
	if _, err := srv.DatabaseOwnership(ctx, name); err != nil {
		return 0, err
	}
	if _, err := srv.RoleOwnership(ctx, name); err != nil {
		return 0, err
	}
	if err := srv.CreateRole(ctx, name, password, claim); err != nil {
		return 0, err
	}
	if err := srv.CreateDatabase(ctx, sp); err != nil {
		return 0, err
	}
	if err := srv.EnsureExtensions(ctx, sp); err != nil {
		return 0, err
	}
	if err := srv.Grant(ctx, sp); err != nil {
		return 0, err
	}
	login := admin
	login.User, login.Password, login.Database, login.MaxConns = name, password, name, 1
	if err := sqlengine.CheckLogin(ctx, login); err != nil {
		return 0, err
	}
	if _, err := srv.Database(ctx, name); err != nil {
		return 0, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "sql", Name: strings.ReplaceAll(name, "_", "-")}}
	if err := b.c.Create(ctx, cm); err != nil {
		return 0, err
	}
	for i, data := range []map[string]string{{"finalizer": "x"}, {"status": strings.Repeat("x", 400)}} {
		patch := client.MergeFrom(cm.DeepCopy())
		cm.Data = data
		if err := b.c.Patch(ctx, cm, patch); err != nil {
			return 0, fmt.Errorf("patch %d: %w", i, err)
		}
		if i == 0 {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "sql", Name: cm.Name},
				StringData: map[string]string{"password": password}}
			if err := b.c.Create(ctx, sec); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}

// sync creates a GitRepository and one Sync of the repository's objects in
// a new namespace and returns the time until the Sync is Ready. started,
// if set, runs once the Sync has begun applying (its first objects exist).
func (b *bench) sync(url string, started func()) (time.Duration, error) {
	ns, err := b.next("sync")
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := b.c.Create(b.ctx, &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo"},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: url, Interval: &metav1.Duration{Duration: time.Hour}}}); err != nil {
		return 0, err
	}
	s := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
		Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "repo"}, Path: "app", Prune: ptr.To(true),
			TargetNamespace: ns, Interval: &metav1.Duration{Duration: time.Hour}}}
	if err := b.c.Create(b.ctx, s); err != nil {
		return 0, err
	}
	if started != nil {
		if err := waitFor(b.ctx, 5*time.Minute, func() (bool, error) {
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
			err := b.c.List(b.ctx, l, client.InNamespace(ns), client.MatchingLabels{gitopsv1alpha1.SyncNameLabel: "big"}, client.Limit(1))
			return err == nil && len(l.Items) > 0, err
		}); err != nil {
			return 0, fmt.Errorf("waiting for the Sync to start applying: %w", err)
		}
		started()
	}
	if err := waitFor(b.ctx, 30*time.Minute, func() (bool, error) {
		err := b.c.Get(b.ctx, client.ObjectKeyFromObject(s), s)
		return err == nil && meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.ReadyCondition), err
	}); err != nil {
		return 0, fmt.Errorf("waiting for the Sync to be Ready: %w", err)
	}
	return time.Since(start), nil
}

// repo writes a bare git repository whose app/ holds n ConfigMaps and
// returns its file:// URL.
func (b *bench) repo(n int) (string, error) {
	work := filepath.Join(b.root, "work")
	if err := os.MkdirAll(filepath.Join(work, "app"), 0o755); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	for i := range n {
		cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%05d", i)}, "data": map[string]any{"k": "v"}}
		y, err := yaml.Marshal(cm)
		if err != nil {
			return "", err
		}
		buf.WriteString("---\n")
		buf.Write(y)
	}
	if err := os.WriteFile(filepath.Join(work, "app", "objects.yaml"), buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	bare := filepath.Join(b.root, "repo.git")
	for _, c := range []struct {
		dir  string
		args []string
	}{
		{work, []string{"init", "-q", "-b", "main"}},
		{work, []string{"add", "-A"}},
		{work, []string{"commit", "-q", "-m", "objects"}},
		{b.root, []string{"clone", "-q", "--bare", work, bare}},
	} {
		cmd := exec.CommandContext(b.ctx, "git", c.args...)
		cmd.Dir = c.dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=b@example.com",
			"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=b@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("git %v: %w: %s", c.args, err, out)
		}
	}
	return "file://" + bare, nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// waitFor polls f every 50 ms (apimachinery's poll) until it says true,
// fails, timeout passes or ctx ends.
func waitFor(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return f() })
}
