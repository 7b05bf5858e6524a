// Command scale loads one Converge manager with several systems at once on
// one local control plane (internal/testenv: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, one kwok node), each at a size
// set by a flag (0 skips a system):
//
//   - GitOps: -syncs Syncs of -objects-per-sync ConfigMaps each, from one
//     GitRepository;
//   - Certificates: -certificates Certificates from a ca Issuer;
//   - KwokMachines: -machines KwokMachines and Machines, until every Machine
//     is Running with a Ready Node;
//   - MachineBMCs: -bmcs MachineBMCs (Redfish) for the first Machines, until
//     Ready;
//   - a MachineUpgrade of the first -upgrade Machines at -upgrade-max,
//     created once the Machines and BMCs are up, until Succeeded;
//   - Databases: -databases Databases on a real PostgreSQL;
//   - workloads: BasicDeployments totalling -pods Pods (-deployments of
//     them), side by side with apps/v1 Deployments of the same sizes run by
//     kube-controller-manager at the same API budget (-qps, -burst).
//
// The manager is `converge run` built from this tree, a process of its own
// with every controller (bench/internal/managerproc). Before the load, each
// system's floor is measured in the same run as its own benchmark measures
// it (bench/internal/floors, bench/internal/gitfixture): the Syncs' objects
// applied by a plain 8-way server-side-apply loop; the Certificates' keys,
// signatures and Secrets by a plain 8-way loop at the certificate
// controllers' budget; the Machines' Nodes registered by a plain loop at 20
// QPS; the MachineUpgrade's by bench/upgrade's plain loop on a fleet of its
// own (deleted before the load); the Databases' by bench/databases' plain
// sequential SQL loop; the MachineBMCs have none. The Deployments' floor is
// kube-controller-manager itself, run at the same time. Then everything is
// created at once and it prints, as BENCH lines: the time from the start of the load to all Ready per system (with
// its ratio to the floor; the MachineUpgrade's from its creation); GitOps
// drift edit -> corrected and push -> applied p50/p99 while everything is
// managed; Database DROP -> recreated p50/p99 against the observe
// interval; the manager's RSS and Go heap once everything is Ready and after the rest period, and its peak RSS; and the API requests
// per second the API server receives at rest (-rest after everything is
// Ready; every client: the manager, kube-controller-manager, the scheduler,
// kwok's Node heartbeats). It asserts nothing. From the repository root
// (after `make tools`):
//
//	go run ./bench/scale -syncs 10 -objects-per-sync 100 -pods 1000 -certificates 1000 \
//	    -machines 100 -bmcs 100 -upgrade 100 -databases 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/apicount"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/bench/internal/fleet"
	"github.com/converge-dev/converge/bench/internal/floors"
	"github.com/converge-dev/converge/bench/internal/gitfixture"
	"github.com/converge-dev/converge/bench/internal/managerproc"
	"github.com/converge-dev/converge/bench/internal/par"
	"github.com/converge-dev/converge/bench/internal/pgload"
	"github.com/converge-dev/converge/internal/controller/basicdeployment"
	"github.com/converge-dev/converge/internal/controller/basicreplicaset"
	"github.com/converge-dev/converge/internal/controller/certificate"
	"github.com/converge-dev/converge/internal/controller/certificaterequest"
	"github.com/converge-dev/converge/internal/gitops/receiver"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	nSyncs      = flag.Int("syncs", 100, "Syncs (0 skips GitOps)")
	nPerSync    = flag.Int("objects-per-sync", 100, "ConfigMaps per Sync")
	nPods       = flag.Int("pods", 10000, "Pods in all, over -deployments BasicDeployments and as many apps/v1 Deployments (0 skips them)")
	nDeploy     = flag.Int("deployments", 10, "BasicDeployments (and apps/v1 Deployments) the Pods are split over")
	nCerts      = flag.Int("certificates", 10000, "Certificates from a ca Issuer (0 skips them)")
	nMachines   = flag.Int("machines", 1000, "KwokMachines and Machines (0 skips them)")
	nBMCs       = flag.Int("bmcs", 1000, "MachineBMCs (Redfish) for the first of the -machines Machines (0 skips them)")
	nUpgrade    = flag.Int("upgrade", 1000, "Machines (of the first -bmcs, which have BMCs) one MachineUpgrade upgrades once the fleet is up (0 skips it)")
	upgradeMax  = flag.Int("upgrade-max", 25, "the MachineUpgrade's maxUnavailable (and its floor's workers)")
	nDatabases  = flag.Int("databases", 1000, "Databases on a real PostgreSQL (0 skips them)")
	nDrops      = flag.Int("drops", 10, "out-of-band DROP DATABASEs, once everything is Ready, for the drop -> recreated latency")
	observe     = flag.Duration("database-observe", 10*time.Second, "the manager's --database-observe-interval")
	nPushes     = flag.Int("pushes", 20, "commits pushed to the Syncs' repository (each changing one Sync's object, with a push webhook), once everything is Ready, for the push -> applied latency")
	nEdits      = flag.Int("edits", 100, "out-of-band edits of Sync-managed ConfigMaps for the drift latency, once everything is Ready")
	restFor     = flag.Duration("rest", 30*time.Second, "rest period, after everything is Ready, over which the API requests per second are counted")
	timeout     = flag.Duration("timeout", 60*time.Minute, "give up on the load after this long")
	qps         = flag.Float64("qps", 20, "client-side QPS of the workload controllers on both sides (kube-controller-manager's default)")
	burst       = flag.Int("burst", 30, "client-side burst of the workload controllers on both sides")
	certQPS     = flag.Float64("certificate-qps", 50, "client-side QPS of the certificate and certificaterequest controllers and of their floor, as bench/certificates")
	certBurst   = flag.Int("certificate-burst", 100, "client-side burst, as -certificate-qps")
	exeFlag     = flag.String("converge", "", "the converge binary to run; empty builds one from this tree as `make build` does")
	heapProfile = flag.String("heapprofile", "", "save the manager's heap profile here after the rest period")
)

const workers = 8

func main() {
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// system is one system of the load: load creates its objects and returns
// when all are Ready, with its own time when that does not start with the
// load (else 0); floor, when set, is the time its floor took.
type system struct {
	name  string
	floor time.Duration
	load  func(ctx context.Context) (time.Duration, error)
	// took is from the start of the load to all Ready; own, when set, the
	// time load measured itself (compared with the floor instead).
	took, own time.Duration
	err       error
}

// since wraps a load that starts with the load's start.
func since(f func(ctx context.Context) error) func(ctx context.Context) (time.Duration, error) {
	return func(ctx context.Context) (time.Duration, error) { return 0, f(ctx) }
}

func run(ctx context.Context) error {
	root, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if *nBMCs > *nMachines || *nUpgrade > *nBMCs {
		return fmt.Errorf("want -upgrade (%d) <= -bmcs (%d) <= -machines (%d): the upgraded Machines need BMCs", *nUpgrade, *nBMCs, *nMachines)
	}
	var srv *sqltest.Server
	if *nDatabases > 0 {
		step("starting PostgreSQL")
		if srv, err = sqltest.StartPostgres(ctx); err != nil {
			return err
		}
		defer func() { _ = srv.Stop() }()
	}
	step("building converge")
	exe, err := managerproc.Build(ctx, *exeFlag, root)
	if err != nil {
		return err
	}
	step("starting the control plane (kube-controller-manager at %v QPS / burst %d, scheduler, 1 kwok node)", *qps, *burst)
	env, err := testenv.Start(ctx, testenv.Options{NoManager: true, ControllerManager: true, Scheduler: true, Nodes: 1,
		ControllerManagerArgs: []string{fmt.Sprintf("--kube-api-qps=%v", *qps), fmt.Sprintf("--kube-api-burst=%d", *burst)},
		Manager: func(o *setup.Options) {
			o.GitOps.Lockdown = false // the benchmark's Syncs act as the manager, as under `converge up`
			o.Receiver.BindAddress = "0"
		}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	cache := filepath.Join(root, "artifacts")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	receiverURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"--controllers", "*", "--gitops-lockdown=false", "--gitops-cache-dir", cache,
		"--database-observe-interval", observe.String(),
		// The pushes measure latency, not the receiver's rate limits (as bench/gitops).
		"--receiver-bind-address", strings.TrimPrefix(receiverURL, "http://"),
		"--receiver-rate", "1000", "--receiver-burst", "1000", "--receiver-source-rate", "1000", "--receiver-source-burst", "1000",
		fmt.Sprintf("--kube-api-qps=%s=%v,%s=%v,%s=%v,%s=%v", basicdeployment.ControllerName, *qps, basicreplicaset.ControllerName, *qps,
			certificate.ControllerName, *certQPS, certificaterequest.ControllerName, *certQPS),
		fmt.Sprintf("--kube-api-burst=%s=%d,%s=%d,%s=%d,%s=%d", basicdeployment.ControllerName, *burst, basicreplicaset.ControllerName, *burst,
			certificate.ControllerName, *certBurst, certificaterequest.ControllerName, *certBurst)}
	mgr, err := managerproc.Start(env, exe, root, args...)
	if err != nil {
		return err
	}
	defer func() { _ = mgr.Stop() }()
	step("manager: converge run, pid %d, every controller", mgr.Pid())
	c := env.Client
	for _, ns := range []string{"floor-gitops", "floor-certificates", "floor-upgrade", "gitops", "certificates", "machines", "workloads", "databases"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	systems, fx, err := prepare(ctx, env, root, srv)
	if err != nil {
		return err
	}
	if len(systems) == 0 {
		return fmt.Errorf("every system is at size 0")
	}

	all, err := loadAll(ctx, systems)
	if err != nil {
		return err
	}

	steady, err := memory(mgr, "")
	if err != nil {
		return err
	}

	f, err := latencies(ctx, c, root, receiverURL, fx, srv)
	if err != nil {
		return err
	}

	step("at rest for %s", *restFor)
	before, err := apicount.Scrape(ctx, env.Clientset)
	if err != nil {
		return err
	}
	time.Sleep(*restFor)
	after, err := apicount.Scrape(ctx, env.Clientset)
	if err != nil {
		return err
	}
	atRest := after.Minus(before)
	rested, err := memory(mgr, *heapProfile)
	if err != nil {
		return err
	}

	report(systems, fx.apps, all, f, steady, rested, atRest)
	return nil
}

// loadAll loads every system at once and returns when all are Ready.
func loadAll(ctx context.Context, systems []*system) (time.Duration, error) {
	step("load: %d systems at once", len(systems))
	lctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for _, s := range systems {
		wg.Go(func() {
			s.own, s.err = s.load(lctx)
			s.took = time.Since(start)
			step("%s: all Ready after %s (err %v)", s.name, s.took.Round(time.Millisecond), s.err)
		})
	}
	wg.Wait()
	for _, s := range systems {
		if s.err != nil {
			return 0, fmt.Errorf("%s: %w", s.name, s.err)
		}
	}
	return time.Since(start), nil
}

// latencies measures, once everything is Ready, drift edits, pushes and
// DROPs while the whole load stays managed.
func latencies(ctx context.Context, c client.Client, root, receiverURL string, fx fixtures, srv *sqltest.Server) (f figures, err error) {
	if len(fx.driftNames) > 0 && *nEdits > 0 {
		step("%d out-of-band edits of Sync-managed ConfigMaps", *nEdits)
		if f.drift, err = driftEdits(ctx, c, "gitops", fx.driftNames, *nEdits); err != nil {
			return f, err
		}
	}
	if len(fx.paths) > 0 && *nPushes > 0 {
		step("%d pushes, each changing one Sync's object", *nPushes)
		if f.push, err = pushes(ctx, c, root, receiverURL, fx.dirs, fx.paths, *nPushes); err != nil {
			return f, err
		}
	}
	if srv != nil && *nDrops > 0 {
		step("%d out-of-band DROP DATABASEs", min(*nDrops, *nDatabases))
		for i := range min(*nDrops, *nDatabases) {
			d, err := pgload.DropAndWait(ctx, srv, pgload.DatabaseName(i))
			if err != nil {
				return f, err
			}
			f.drops = append(f.drops, d)
		}
	}

	return f, nil
}

// fixtures is what prepare made for the figures after the load.
type fixtures struct {
	// apps is kube-controller-manager's Deployments (the BasicDeployments'
	// floor) when workloads are loaded.
	apps *system
	// driftNames are Sync-managed ConfigMaps to edit; dirs the objects of
	// the Syncs' repository by directory (Sync path), paths those paths.
	driftNames []string
	dirs       map[string][]*unstructured.Unstructured
	paths      []string
}

// figures are the latencies measured once everything is Ready.
type figures struct{ drift, push, drops []time.Duration }

// prepare measures the floors of the systems at their sizes, alone, and
// returns the systems to load.
func prepare(ctx context.Context, env *testenv.Environment, root string, srv *sqltest.Server) (systems []*system, fx fixtures, err error) {
	c := env.Client
	throttled := func(q float32, b int) (client.Client, error) {
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = q, b
		return client.New(cfg, client.Options{Scheme: setup.Scheme()})
	}

	// GitOps.
	if *nSyncs > 0 {
		sys, err := prepareSyncs(ctx, c, root, &fx)
		if err != nil {
			return nil, fx, err
		}
		systems = append(systems, sys)
	}

	// Certificates.
	if *nCerts > 0 {
		ca, err := floors.NewCA()
		if err != nil {
			return nil, fx, err
		}
		fc, err := throttled(float32(*certQPS), *certBurst)
		if err != nil {
			return nil, fx, err
		}
		spec := func(i int) *pkiv1alpha1.CertificateSpec {
			return &pkiv1alpha1.CertificateSpec{SecretName: fmt.Sprintf("c%d-tls", i), DNSNames: []string{fmt.Sprintf("c%d.example.com", i)},
				PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ca"}}
		}
		step("floor: %d Certificates' keys, signatures and Secrets by a %d-way loop at %v QPS", *nCerts, workers, *certQPS)
		floor, err := floors.Certificates(ctx, fc, ca, "floor-certificates", *nCerts, workers, spec)
		if err != nil {
			return nil, fx, err
		}
		systems = append(systems, &system{name: fmt.Sprintf("certificates_%d", *nCerts), floor: floor,
			load: since(func(ctx context.Context) error { return loadCertificates(ctx, c, "certificates", ca, *nCerts, spec) })})
	}

	// KwokMachines.
	if *nMachines > 0 {
		fc, err := throttled(20, 30)
		if err != nil {
			return nil, fx, err
		}
		step("floor: %d kwok Nodes registered by a loop at 20 QPS", *nMachines)
		floor, err := floors.KwokNodes(ctx, fc, "floor", *nMachines)
		if err != nil {
			return nil, fx, err
		}
		systems = append(systems, &system{name: fmt.Sprintf("kwokmachines_%d", *nMachines), floor: floor,
			load: since(func(ctx context.Context) error { return loadMachines(ctx, c, "machines", *nMachines) })})
	}

	// MachineBMCs: no floor (bench/bmc has none for the time to Ready).
	if *nBMCs > 0 {
		systems = append(systems, &system{name: fmt.Sprintf("machinebmcs_%d", *nBMCs),
			load: since(func(ctx context.Context) error { return loadBMCs(ctx, c, "machines", *nBMCs) })})
	}

	// A MachineUpgrade, against bench/upgrade's floor on a fleet of its own
	// (deleted before the load).
	if *nUpgrade > 0 {
		fc, err := throttled(20, 30) // the machineupgrade controller's budget
		if err != nil {
			return nil, fx, err
		}
		floor, err := upgradeFloor(ctx, c, fc, "floor-upgrade", *nUpgrade, *upgradeMax)
		if err != nil {
			return nil, fx, fmt.Errorf("upgrade floor: %w", err)
		}
		systems = append(systems, &system{name: fmt.Sprintf("machineupgrade_%d_max%d", *nUpgrade, *upgradeMax), floor: floor,
			load: func(ctx context.Context) (time.Duration, error) {
				return loadUpgrade(ctx, c, "machines", *nMachines, *nBMCs, *nUpgrade, *upgradeMax)
			}})
	}

	// Databases on PostgreSQL: the floor is bench/databases' (a plain
	// sequential SQL loop); the PostgresInstance is Ready before the load.
	if *nDatabases > 0 {
		step("floor: %d Databases' statements by a plain sequential SQL loop", *nDatabases)
		floor, err := floors.Databases(ctx, srv, *nDatabases, 1)
		if err != nil {
			return nil, fx, fmt.Errorf("database floor: %w", err)
		}
		if err := pgload.CreateInstance(ctx, c, "databases", srv); err != nil {
			return nil, fx, err
		}
		systems = append(systems, &system{name: fmt.Sprintf("databases_%d", *nDatabases), floor: floor,
			load: since(func(ctx context.Context) error {
				_, err := pgload.CreateAndWait(ctx, c, "databases", 0, *nDatabases, *timeout, 200*time.Millisecond)
				return err
			})})
	}

	// Workloads: both sides at once; the Deployments' time is the floor.
	if *nPods > 0 && *nDeploy > 0 {
		fx.apps = &system{name: "deployments", load: since(func(ctx context.Context) error { return loadWorkloads(ctx, c, "workloads", false) })}
		systems = append(systems, &system{name: fmt.Sprintf("basicdeployments_%d_pods", *nPods),
			load: since(func(ctx context.Context) error { return loadWorkloads(ctx, c, "workloads", true) })}, fx.apps)
	}
	return systems, fx, nil
}

// prepareSyncs writes the Syncs' repository (its objects in fx), measures
// the GitOps floor (an SSA loop over the same objects) and returns the
// Syncs' system.
func prepareSyncs(ctx context.Context, c client.Client, root string, fx *fixtures) (*system, error) {
	fx.dirs = map[string][]*unstructured.Unstructured{}
	var all []*unstructured.Unstructured
	for i := range *nSyncs {
		p := fmt.Sprintf("s%03d", i)
		fx.paths = append(fx.paths, p)
		for j := range *nPerSync {
			cm := gitfixture.ConfigMap(fmt.Sprintf("%s-cm%03d", p, j), "v")
			fx.dirs[p] = append(fx.dirs[p], cm)
			all = append(all, cm)
			if j == 0 {
				fx.driftNames = append(fx.driftNames, cm.GetName())
			}
		}
	}
	url, err := gitfixture.Repo(root, repoName, fx.dirs)
	if err != nil {
		return nil, err
	}
	step("floor: %d objects by an %d-way SSA loop", len(all), workers)
	start := time.Now()
	if err := gitfixture.ApplyLoop(ctx, c, "floor-gitops", all, workers); err != nil {
		return nil, err
	}
	return &system{name: fmt.Sprintf("syncs_%dx%d", *nSyncs, *nPerSync), floor: time.Since(start),
		load: since(func(ctx context.Context) error { return loadSyncs(ctx, c, "gitops", url, fx.paths) })}, nil
}

// report prints the figures and their BENCH lines.
func report(systems []*system, apps *system, all time.Duration, f figures, steady, rested mem, atRest apicount.Counts) {
	fmt.Printf("bench/scale: one manager, all systems at once (load average %s)\n", loadavg())
	for _, s := range systems {
		if s == apps {
			continue
		}
		took, what := s.took, "all Ready"
		if s.own > 0 {
			took, what = s.own, fmt.Sprintf("from %s after the start, done in", (s.took-s.own).Round(time.Millisecond))
		}
		floor, floorWhat := s.floor, "floor"
		if floor == 0 && apps != nil && strings.HasPrefix(s.name, "basicdeployments") {
			floor, floorWhat = apps.took, "kube-controller-manager's Deployments, same time"
		}
		if floor == 0 {
			fmt.Printf("  %-32s %s %8s  (no floor)\n", s.name, what, took.Round(time.Millisecond))
			benchout.Line("scale."+s.name+"_ready_seconds", took.Seconds(), "s")
			continue
		}
		fmt.Printf("  %-32s %s %8s  %s %8s  ratio %.2f\n", s.name, what, took.Round(time.Millisecond), floorWhat, floor.Round(time.Millisecond), took.Seconds()/floor.Seconds())
		benchout.Line("scale."+s.name+"_floor_seconds", floor.Seconds(), "s")
		benchout.Ratio("scale."+s.name+"_ready_seconds", took.Seconds(), "s", took.Seconds()/floor.Seconds())
	}
	fmt.Printf("  %-32s %s\n", "everything Ready", all.Round(time.Millisecond))
	benchout.Line("scale.all_ready_seconds", all.Seconds(), "s")
	if len(f.drift) > 0 {
		p50, p99 := pct(f.drift, 0.5), pct(f.drift, 0.99)
		fmt.Printf("  %-32s p50 %s, p99 %s (n=%d)\n", "drift edit -> corrected", p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(f.drift))
		benchout.Line("scale.drift_corrected_p50", float64(p50.Milliseconds()), "ms")
		benchout.Line("scale.drift_corrected_p99", float64(p99.Milliseconds()), "ms")
	}
	if len(f.push) > 0 {
		p50, p99 := pct(f.push, 0.5), pct(f.push, 0.99)
		fmt.Printf("  %-32s p50 %s, p99 %s (n=%d)\n", "push -> applied", p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(f.push))
		benchout.Line("scale.push_applied_p50", float64(p50.Milliseconds()), "ms")
		benchout.Line("scale.push_applied_p99", float64(p99.Milliseconds()), "ms")
	}
	if len(f.drops) > 0 {
		p50, p99 := pct(f.drops, 0.5), pct(f.drops, 0.99)
		fmt.Printf("  %-32s p50 %s, p99 %s (n=%d; observe interval %s, ratio to it %.2f)\n", "DROP DATABASE -> recreated",
			p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(f.drops), *observe, p99.Seconds()/observe.Seconds())
		benchout.Ratio("scale.database_drop_recreated_p50", float64(p50.Milliseconds()), "ms", p50.Seconds()/observe.Seconds())
		benchout.Ratio("scale.database_drop_recreated_p99", float64(p99.Milliseconds()), "ms", p99.Seconds()/observe.Seconds())
	}
	fmt.Printf("  %-32s RSS %d MiB, Go heap in use %d MiB\n", "manager, all Ready", steady.rss, steady.heap)
	fmt.Printf("  %-32s RSS %d MiB, Go heap in use %d MiB; peak RSS %d MiB\n", "manager, after the rest", rested.rss, rested.heap, rested.peak)
	benchout.Line("scale.manager_rss_ready", float64(steady.rss), "MiB")
	benchout.Line("scale.manager_heap_ready", float64(steady.heap), "MiB")
	benchout.Line("scale.manager_rss_rest", float64(rested.rss), "MiB")
	benchout.Line("scale.manager_heap_rest", float64(rested.heap), "MiB")
	benchout.Line("scale.manager_rss_peak", float64(rested.peak), "MiB")
	secs := restFor.Seconds()
	fmt.Printf("  %-32s %.1f requests/s (%.1f writes/s), every client, over %s\n", "API at rest", atRest.Total()/secs, atRest.AllWrites().Total()/secs, *restFor)
	fmt.Fprintf(os.Stderr, "API requests at rest over %s: %s\n", *restFor, atRest)
	benchout.Line("scale.api_requests_per_s_at_rest", atRest.Total()/secs, "1/s")
	benchout.Line("scale.api_writes_per_s_at_rest", atRest.AllWrites().Total()/secs, "1/s")
}

type mem struct{ rss, heap, peak int64 }

// memory reads the manager's RSS, peak RSS and Go heap in use (MiB).
func memory(mgr *managerproc.Manager, profile string) (mem, error) {
	line, m, err := mgr.Describe(profile)
	if err != nil {
		return mem{}, err
	}
	fmt.Fprintln(os.Stderr, "  manager:", line)
	h, err := mgr.Heap("")
	if err != nil {
		return mem{}, err
	}
	return mem{rss: m.RSS, heap: h.InUse >> 20, peak: m.HWM}, nil
}

// poll calls done every 200 ms until it says true.
func poll(ctx context.Context, done func() (bool, error)) error {
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) { return done() })
}

// readyCount is how many of n objects have Ready=True, conds(i) being the
// conditions of the i-th.
func readyCount(n int, conds func(i int) []metav1.Condition) int {
	ready := 0
	for i := range n {
		if meta.IsStatusConditionTrue(conds(i), "Ready") {
			ready++
		}
	}
	return ready
}

// hookToken signs the push webhooks.
const hookToken = "t"

func loadSyncs(ctx context.Context, c client.Client, ns, url string, paths []string) error {
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"}, StringData: map[string]string{"token": hookToken}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo",
		Annotations: map[string]string{receiver.SecretAnnotation: "hook"}},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: url, Interval: &metav1.Duration{Duration: time.Hour}}}); err != nil {
		return err
	}
	for _, p := range paths {
		if err := c.Create(ctx, &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sync-" + p},
			Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "repo"}, Path: p, Prune: ptr.To(true),
				TargetNamespace: ns, Interval: &metav1.Duration{Duration: time.Hour}}}); err != nil {
			return err
		}
	}
	return poll(ctx, func() (bool, error) {
		l := &gitopsv1alpha1.SyncList{}
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return readyCount(len(l.Items), func(i int) []metav1.Condition { return l.Items[i].Status.Conditions }) == len(paths), nil
	})
}

func loadCertificates(ctx context.Context, c client.Client, ns string, ca *floors.CA, n int, spec func(int) *pkiv1alpha1.CertificateSpec) error {
	s := ca.Secret.DeepCopy()
	s.Namespace = ns
	if err := c.Create(ctx, s); err != nil {
		return err
	}
	if err := c.Create(ctx, &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"},
		Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "ca"}}}); err != nil {
		return err
	}
	if err := par.Do(workers, n, func(i int) error {
		return c.Create(ctx, &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%d", i)}, Spec: *spec(i)})
	}); err != nil {
		return err
	}
	return poll(ctx, func() (bool, error) {
		l := &pkiv1alpha1.CertificateList{}
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return readyCount(len(l.Items), func(i int) []metav1.Condition { return l.Items[i].Status.Conditions }) == n, nil
	})
}

// machineName is the i-th KwokMachine's, Machine's and MachineBMC's name.
func machineName(i int) string { return fmt.Sprintf("m-%d", i) }

func machineNames(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, machineName(i))
	}
	return out
}

// upgradePool labels the Machines the MachineUpgrade selects.
var upgradePool = map[string]string{"pool": "upgrade"}

// loadMachines creates n KwokMachines and Machines, the first -upgrade
// labelled for the MachineUpgrade, and waits until every Machine is Running
// with a healthy Node.
func loadMachines(ctx context.Context, c client.Client, ns string, n int) error {
	if err := fleet.Machines(ctx, c, ns, machineNames(0, *nUpgrade), upgradePool); err != nil {
		return err
	}
	if err := fleet.Machines(ctx, c, ns, machineNames(*nUpgrade, n), nil); err != nil {
		return err
	}
	return fleet.WaitUntil(ctx, c, ns, 200*time.Millisecond, func(f fleet.Counts) bool { return f.Healthy == n })
}

// loadBMCs creates MachineBMCs for the first n Machines (made at the same
// time by loadMachines) and waits until they are Ready.
func loadBMCs(ctx context.Context, c client.Client, ns string, n int) error {
	if err := fleet.BMCs(ctx, c, ns, machineNames(0, n)); err != nil {
		return err
	}
	return fleet.WaitUntil(ctx, c, ns, 200*time.Millisecond, func(f fleet.Counts) bool { return f.BMCsReady == n })
}

// loadUpgrade waits until the fleet of ns is up (machines healthy, bmcs
// BMCs Ready), then upgrades the first n Machines with one MachineUpgrade
// at maxUnavailable mu, and returns its time from its creation to
// Succeeded.
func loadUpgrade(ctx context.Context, c client.Client, ns string, machines, bmcs, n, mu int) (time.Duration, error) {
	if err := fleet.WaitUntil(ctx, c, ns, time.Second, func(f fleet.Counts) bool { return f.Healthy == machines && f.BMCsReady == bmcs }); err != nil {
		return 0, err
	}
	step("fleet up: MachineUpgrade of %d Machines at maxUnavailable %d", n, mu)
	return fleet.Upgrade(ctx, c, ns, "upgrade", upgradePool, n, mu, "v2", "2")
}

// upgradeFloor makes a fleet of n Machines with BMCs in ns (not timed),
// upgrades it by hand mu at a time through fc (bench/upgrade's floor),
// and deletes ns, waiting up to five minutes for it to go, so the load
// starts without it.
func upgradeFloor(ctx context.Context, c, fc client.Client, ns string, n, mu int) (time.Duration, error) {
	step("floor: a fleet of %d Machines with BMCs (not timed)", n)
	names := machineNames(0, n)
	if err := fleet.Machines(ctx, c, ns, names, nil); err != nil {
		return 0, err
	}
	if err := fleet.BMCs(ctx, c, ns, names); err != nil {
		return 0, err
	}
	if err := fleet.WaitUntil(ctx, c, ns, 500*time.Millisecond, func(f fleet.Counts) bool { return f.Running+f.BMCsReady == 2*n }); err != nil {
		return 0, err
	}
	step("floor: %d Machines upgraded by a plain loop, %d at a time, at 20 QPS", n, mu)
	floor, err := floors.MachineUpgrade(ctx, fc, ns, names, mu, "floor", "f", fleet.User, fleet.Password)
	if err != nil {
		return 0, err
	}
	step("deleting the floor's fleet")
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return 0, err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := poll(dctx, func() (bool, error) {
		err := c.Get(dctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}); err != nil {
		step("the floor's namespace %s is not gone after 5 minutes (%v); loading beside it", ns, err)
	}
	return floor, nil
}

// repoName is the Syncs' repository (gitfixture.Repo under the run's
// root).
const repoName = "scale"

// pushes commits, n times, a change of the first object of one Sync (in
// turn) to the Syncs' repository, sends a push webhook for it, and times
// each until the object carries the change.
func pushes(ctx context.Context, c client.Client, root, receiverURL string, dirs map[string][]*unstructured.Unstructured, paths []string, n int) ([]time.Duration, error) {
	gr := &gitopsv1alpha1.GitRepository{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "gitops", Name: "repo"}, gr); err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := range n {
		p := paths[i%len(paths)]
		objs := append([]*unstructured.Unstructured(nil), dirs[p]...)
		v := "pushed-" + strconv.Itoa(i)
		objs[0] = gitfixture.ConfigMap(objs[0].GetName(), v)
		if err := gitfixture.Write(filepath.Join(gitfixture.Dir(root, repoName), p, "objects.yaml"), objs...); err != nil {
			return nil, err
		}
		if err := gitfixture.Push(root, repoName, v); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := gitfixture.Hook(ctx, receiverURL, gr.Namespace, gr.Name, []byte(hookToken)); err != nil {
			return nil, err
		}
		for {
			got := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "gitops", Name: objs[0].GetName()}, got); err == nil && got.Data["key"] == v {
				break
			}
			if time.Since(start) > 5*time.Minute {
				return nil, fmt.Errorf("push %s to %s not applied within 5 minutes", v, p)
			}
			time.Sleep(5 * time.Millisecond)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// loadWorkloads creates -deployments BasicDeployments (basic) or apps/v1
// Deployments sharing -pods replicas, and waits until every one has all
// its replicas updated and available.
func loadWorkloads(ctx context.Context, c client.Client, ns string, basic bool) error {
	type status struct{ want, replicas, updated, available int32 }
	var names []string
	for i := range *nDeploy {
		replicas := int32(*nPods / *nDeploy) //nolint:gosec // flags
		if i < *nPods%*nDeploy {
			replicas++
		}
		app := fmt.Sprintf("apps-%d", i)
		if basic {
			app = fmt.Sprintf("basic-%d", i)
		}
		names = append(names, app)
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
		tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1"}}}}
		var obj client.Object = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: sel, Template: tmpl}}
		if basic {
			obj = &workloadsv1alpha1.BasicDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
				Spec: workloadsv1alpha1.BasicDeploymentSpec{Replicas: ptr.To(replicas), Selector: sel, Template: tmpl}}
		}
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
	}
	return poll(ctx, func() (bool, error) {
		for _, name := range names {
			key := client.ObjectKey{Namespace: ns, Name: name}
			var gen, observed int64
			var s status
			if basic {
				d := &workloadsv1alpha1.BasicDeployment{}
				if err := c.Get(ctx, key, d); err != nil {
					return false, err
				}
				gen, observed = d.Generation, d.Status.ObservedGeneration
				s = status{*d.Spec.Replicas, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas}
			} else {
				d := &appsv1.Deployment{}
				if err := c.Get(ctx, key, d); err != nil {
					return false, err
				}
				gen, observed = d.Generation, d.Status.ObservedGeneration
				s = status{*d.Spec.Replicas, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas}
			}
			if observed < gen || s.replicas != s.want || s.updated != s.want || s.available != s.want {
				return false, nil
			}
		}
		return true, nil
	})
}

// driftEdits edits the ConfigMaps names (in turn) with another field
// manager and times each until its Sync has restored it.
func driftEdits(ctx context.Context, c client.Client, ns string, names []string, edits int) ([]time.Duration, error) {
	var out []time.Duration
	for i := range edits {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: names[i%len(names)]}, cm); err != nil {
			return nil, err
		}
		cm.Data["key"] = "edited-" + strconv.Itoa(i)
		start := time.Now()
		if err := c.Update(ctx, cm, client.FieldOwner("bench-intruder")); err != nil {
			return nil, err
		}
		for {
			got := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err == nil && got.Data["key"] == "v" {
				break
			}
			if time.Since(start) > time.Minute {
				return nil, fmt.Errorf("drift of %s not corrected within a minute", cm.Name)
			}
			time.Sleep(5 * time.Millisecond)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

func pct(d []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
