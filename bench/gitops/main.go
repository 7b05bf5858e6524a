// Command gitops measures the Sync controller on a local control plane
// (internal/testenv: etcd and kube-apiserver from bin/). By default the
// manager is the real product: `converge run`, built from this tree and
// started as a process of its own with every controller (-manager
// process); -manager in-process runs it inside this process instead, as
// the test suites do. It prints figures and asserts nothing:
//
//  1. one Sync of N objects (ConfigMaps, Services, Deployments) from creation
//     to Ready, against the floor: the same objects applied by a plain
//     server-side-apply loop (sequential, and with the Sync's concurrency);
//  2. S Syncs of 10 objects each, from creation to all Ready;
//  3. out-of-band edit -> corrected latency, p50/p99 over E edits;
//  4. push webhook -> applied latency, p50/p99 over W pushes;
//  5. the manager process's RSS with I objects in inventories.
//
// Run it from the repository root (after `make tools`):
//
//	go run ./bench/gitops
//	go run ./bench/gitops -objects 1000 -syncs 100 -edits 100 -pushes 20 -inventory 10000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/bench/internal/gitfixture"
	"github.com/converge-dev/converge/bench/internal/managerproc"
	"github.com/converge-dev/converge/bench/internal/procmem"
	"github.com/converge-dev/converge/internal/gitops/receiver"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	nObjects    = flag.Int("objects", 1000, "objects of the single big Sync (and of the floor)")
	nSyncs      = flag.Int("syncs", 100, "Syncs of 10 objects")
	nEdits      = flag.Int("edits", 100, "out-of-band edits for the drift latency")
	nPushes     = flag.Int("pushes", 20, "push webhooks for the push latency")
	nInventory  = flag.Int("inventory", 10000, "objects in inventories when RSS is measured")
	workers     = flag.Int("floor-workers", 8, "concurrency of the concurrent floor (the Sync applies with 8 workers)")
	syncRuns    = flag.Int("sync-runs", 5, "runs of (8-way floor, Sync) pairs for the big Sync; the median ratio is printed (one run's ratio moves by 0.2 under load)")
	memProfile  = flag.String("memprofile", "", "write a heap profile here once the inventories are filled")
	controllers = flag.String("controllers", "*", "controllers the manager runs (--controllers), e.g. gitrepository,sync to compare the RSS without the others")
	managerMode = flag.String("manager", "process", "where the manager runs: 'process' (`converge run` built from this tree, its own process; the RSS is that process's) or 'in-process' (in this benchmark's process, beside its client, as the test suites run it)")
	converge    = flag.String("converge", "", "the converge binary to run (-manager process); empty builds one from this tree as `make build` does (internal/replicas.Build)")
	managerArgs = flag.String("manager-args", "", "extra `converge run` arguments, space separated (-manager process), e.g. --gitops-render-cache-objects=0")
)

func main() {
	flag.Parse()
	ctx := context.Background()
	ctrl.SetLogger(logr.Discard()) // the in-process manager's or webhooks' logs
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "bench/gitops:", err)
		os.Exit(1)
	}
	root := must(os.MkdirTemp("", "bench-gitops-"))
	defer os.RemoveAll(root)
	inProcess := *managerMode == "in-process"
	if !inProcess && *managerMode != "process" {
		fail(fmt.Errorf("-manager %q: want process or in-process", *managerMode))
	}
	exe := *converge
	if !inProcess && exe == "" {
		step("building converge")
		exe = must(managerproc.Build(ctx, "", root))
	}
	step("starting the control plane")
	// The pushes measure latency, not the receiver's rate limits.
	env, err := testenv.Start(ctx, testenv.Options{NoManager: !inProcess, Manager: func(o *setup.Options) {
		o.Controllers = strings.Split(*controllers, ",")
		o.GitOps.Lockdown = false // the benchmark's Syncs act as the manager, as under `converge up`
		o.Receiver.SourceRate, o.Receiver.SourceBurst = 1000, 1000
		o.Receiver.Rate, o.Receiver.Burst = 1000, 1000
		if !inProcess {
			// This process only serves the admission webhooks.
			o.Receiver.BindAddress = "0"
		}
	}})
	if err != nil {
		fail(err)
	}
	defer func() { _ = env.Stop() }()
	b := &bench{env: env, c: env.Client, ctx: ctx, root: root, receiverURL: env.ReceiverURL}
	if !inProcess {
		step("starting the manager: converge run")
		m, err := b.startManager(exe)
		if err != nil {
			fail(err)
		}
		defer func() { _ = m.Stop() }()
		b.manager = m
	}

	var rows [][2]string
	add := func(k, v string) { rows = append(rows, [2]string{k, v}); fmt.Fprintf(os.Stderr, "  %s: %s\n", k, v) }

	// (1) floor and one big Sync.
	objs := mixedObjects(*nObjects)
	step(fmt.Sprintf("floor: SSA loop of %d objects", len(objs)))
	seq := b.floor(b.ns("floor-seq"), objs, 1)
	add(fmt.Sprintf("floor, %d objects, sequential SSA", len(objs)), seq.Round(time.Millisecond).String())
	repo1 := b.repo("big", map[string][]*unstructured.Unstructured{"app": objs})
	// Floor and Sync alternate, each pair in fresh namespaces, so a change
	// of the machine's load moves both sides of a ratio; the medians are
	// printed.
	var concs, d1s []time.Duration
	var ratios []float64
	var ns1 string
	for run := range max(1, *syncRuns) {
		step(fmt.Sprintf("run %d: %d-way floor, then one Sync of %d objects", run+1, *workers, len(objs)))
		conc := b.floor(b.ns("floor-conc"), objs, *workers)
		ns1 = b.ns("big")
		d1, err := b.syncs(ns1, repo1, []string{"app"})
		if err != nil {
			fail(err)
		}
		concs, d1s, ratios = append(concs, conc), append(d1s, d1), append(ratios, d1.Seconds()/conc.Seconds())
		add(fmt.Sprintf("run %d: floor %d-way / Sync of %d objects", run+1, *workers, len(objs)), fmt.Sprintf("%s / %s = %.2fx (load %s)",
			conc.Round(time.Millisecond), d1.Round(time.Millisecond), ratios[run], loadavg()))
	}
	conc, d1 := median(concs), median(d1s)
	sort.Float64s(ratios)
	ratio := ratios[len(ratios)/2]
	add(fmt.Sprintf("floor, %d objects, %d concurrent SSA (median of %d)", len(objs), *workers, len(concs)), conc.Round(time.Millisecond).String())
	benchout.Line(fmt.Sprintf("gitops.floor_%d_objects_8_workers", len(objs)), conc.Seconds(), "s")
	benchout.Ratio(fmt.Sprintf("gitops.sync_%d_objects", len(objs)), d1.Seconds(), "s", ratio)
	add(fmt.Sprintf("Sync, %d objects, create -> Ready (median of %d)", len(objs), len(d1s)), fmt.Sprintf("%s (median ratio %.2fx the concurrent floor, range %.2f-%.2f; %.2fx the sequential one)",
		d1.Round(time.Millisecond), ratio, ratios[0], ratios[len(ratios)-1], d1.Seconds()/seq.Seconds()))

	// (2) many small Syncs.
	step(fmt.Sprintf("%d Syncs x 10 objects", *nSyncs))
	ns2 := b.ns("many")
	dirs := map[string][]*unstructured.Unstructured{}
	var paths []string
	for i := range *nSyncs {
		p := fmt.Sprintf("s%03d", i)
		paths = append(paths, p)
		for j := range 10 {
			dirs[p] = append(dirs[p], configMap(fmt.Sprintf("%s-cm%d", p, j), "v"))
		}
	}
	repo2 := b.repo("many", dirs)
	d2, err := b.syncs(ns2, repo2, paths)
	if err != nil {
		fail(err)
	}
	add(fmt.Sprintf("%d Syncs x 10 objects, create -> all Ready", *nSyncs), d2.Round(time.Millisecond).String())
	benchout.Line(fmt.Sprintf("gitops.syncs_%dx10", *nSyncs), d2.Seconds(), "s")

	// (3) drift correction latency, on the big Sync's ConfigMaps.
	step(fmt.Sprintf("%d out-of-band edits", *nEdits))
	lat := b.drift(ns1, *nEdits)
	add("drift: edit -> corrected", pcts(lat))
	if len(lat) > 0 {
		benchout.Line("gitops.drift_corrected_p50", float64(median(lat).Milliseconds()), "ms")
	}

	// (4) push webhook -> applied.
	step(fmt.Sprintf("%d push webhooks", *nPushes))
	plat, err := b.pushes(*nPushes)
	if err != nil {
		fail(err)
	}
	add("push webhook -> applied", pcts(plat))
	if len(plat) > 0 {
		benchout.Line("gitops.push_applied_p50", float64(median(plat).Milliseconds()), "ms")
	}

	// (5) RSS with many objects in inventories.
	have := len(objs)*max(1, *syncRuns) + *nSyncs*10 + 1 + b.warmup
	if rest := *nInventory - have; rest > 0 {
		step(fmt.Sprintf("filling inventories to %d objects", *nInventory))
		ns3 := b.ns("fill")
		fill := map[string][]*unstructured.Unstructured{}
		var fp []string
		for i := 0; rest > 0; i++ {
			p := fmt.Sprintf("f%02d", i)
			fp = append(fp, p)
			for j := 0; j < 1000 && rest > 0; j++ {
				fill[p] = append(fill[p], configMap(fmt.Sprintf("%s-cm%04d", p, j), "v"))
				rest--
			}
		}
		repo3 := b.repo("fill", fill)
		if _, err := b.syncs(ns3, repo3, fp); err != nil {
			fail(err)
		}
	}
	time.Sleep(5 * time.Second)
	if inProcess {
		add(fmt.Sprintf("this process with >= %d inventory objects", *nInventory), b.inProcessMemory())
	} else {
		add(fmt.Sprintf("manager process with >= %d inventory objects", *nInventory), b.managerMemory())
	}

	fmt.Println("bench/gitops results")
	for _, r := range rows {
		fmt.Printf("  %-55s %s\n", r[0], r[1])
	}
}

type bench struct {
	env  *testenv.Environment
	c    client.Client
	ctx  context.Context
	root string
	// receiverURL is the push receiver's base URL: the manager's.
	receiverURL string
	// manager is the `converge run` process (-manager process); warmup
	// counts the objects its warm-up Sync applied.
	manager *managerproc.Manager
	warmup  int
}

// startManager runs `converge run` (exe) against the control plane as a
// process of its own, with the controllers and options the in-process
// manager gets, and returns once it has applied a Sync of one object.
func (b *bench) startManager(exe string) (*managerproc.Manager, error) {
	rport, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	b.receiverURL = fmt.Sprintf("http://127.0.0.1:%d", rport)
	cache := filepath.Join(b.root, "artifacts")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return nil, err
	}
	args := []string{"--controllers", *controllers, "--gitops-lockdown=false", "--gitops-cache-dir", cache,
		"--receiver-bind-address", strings.TrimPrefix(b.receiverURL, "http://"),
		// The pushes measure latency, not the receiver's rate limits.
		"--receiver-rate", "1000", "--receiver-burst", "1000", "--receiver-source-rate", "1000", "--receiver-source-burst", "1000"}
	args = append(args, strings.Fields(*managerArgs)...)
	m, err := managerproc.Start(b.env, exe, b.root, args...)
	if err != nil {
		return nil, err
	}
	// Ready means serving: one Sync of one object applied.
	ns := b.ns("warmup")
	url := b.repo("warmup", map[string][]*unstructured.Unstructured{"app": {configMap("warmup", "v")}})
	d, err := b.syncs(ns, url, []string{"app"})
	if err != nil {
		_ = m.Stop()
		return nil, fmt.Errorf("the manager did not apply the warm-up Sync: %w\n%s", err, m.Log())
	}
	b.warmup = 1
	step(fmt.Sprintf("manager pid %d serving (warm-up Sync Ready after %s)", m.Pid(), d.Round(time.Millisecond)))
	return m, nil
}

// managerMemory reads the `converge run` process's memory as it is (no
// GC forced, nothing returned to the OS first).
func (b *bench) managerMemory() string {
	line, m, err := b.manager.Describe(*memProfile)
	if err != nil {
		return "n/a: " + err.Error()
	}
	benchout.Line(fmt.Sprintf("gitops.rss_%d_inventory", *nInventory), float64(m.RSS), "MiB")
	benchout.Line(fmt.Sprintf("gitops.rss_anon_%d_inventory", *nInventory), float64(m.Anon), "MiB")
	return line
}

// inProcessMemory reads this process's memory: the manager and the
// benchmark's client, test helpers and code share it.
func (b *bench) inProcessMemory() string {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, anon, file := procmem.RSS()
	if maps, err := procmem.Mappings(0); err == nil {
		fmt.Fprintf(os.Stderr, "  mappings, largest resident first: %s\n", procmem.Summary(maps, 6))
	}
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			fmt.Fprintln(os.Stderr, "  heap profile:", err)
		}
	}
	// What the process needs at rest: return freed pages to the OS first.
	debug.FreeOSMemory()
	after, _, _ := procmem.RSS()
	benchout.Line(fmt.Sprintf("gitops.inprocess_rss_%d_inventory", *nInventory), float64(rss), "MiB")
	benchout.Line(fmt.Sprintf("gitops.inprocess_rss_anon_%d_inventory", *nInventory), float64(anon), "MiB")
	return fmt.Sprintf("RSS %d MiB as read after a GC (anonymous %d, file-backed %d: the benchmark binary's pages), %d MiB after returning freed memory to the OS, Go heap in use %d MiB; the manager, the benchmark's client and its code in one process",
		rss, anon, file, after, ms.HeapInuse>>20)
}

func step(s string) { fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), s) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func (b *bench) ns(prefix string) string {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := b.c.Create(b.ctx, n); err != nil {
		panic(err)
	}
	return n.Name
}

func configMap(name, v string) *unstructured.Unstructured { return gitfixture.ConfigMap(name, v) }

func toU(o any) *unstructured.Unstructured {
	m := must(runtimeToMap(o))
	return &unstructured.Unstructured{Object: m}
}

func runtimeToMap(o any) (map[string]any, error) {
	b, err := yaml.Marshal(o)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	err = yaml.Unmarshal(b, &m)
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	delete(m, "status")
	return m, err
}

// mixedObjects: 40% ConfigMaps, 30% Services, 30% Deployments.
func mixedObjects(n int) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for i := range n {
		name := fmt.Sprintf("obj%04d", i)
		switch i % 10 {
		case 0, 1, 2, 3:
			out = append(out, configMap(name, "v"))
		case 4, 5, 6:
			out = append(out, toU(&corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
					Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}))
		default:
			out = append(out, toU(&appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27"}}}}}}))
		}
	}
	return out
}

// floor applies objs into ns with a plain SSA loop over `workers` goroutines.
func (b *bench) floor(ns string, objs []*unstructured.Unstructured, workers int) time.Duration {
	start := time.Now()
	if err := gitfixture.ApplyLoop(b.ctx, b.c, ns, objs, workers); err != nil {
		panic(err)
	}
	return time.Since(start)
}

// repo writes a bare git repository with one directory per key and returns
// its file:// URL.
func (b *bench) repo(name string, dirs map[string][]*unstructured.Unstructured) string {
	return must(gitfixture.Repo(b.root, name, dirs))
}

// syncs creates a GitRepository for url and one Sync per path in ns and
// returns the time until all are Ready.
func (b *bench) syncs(ns, url string, paths []string) (time.Duration, error) {
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo"},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: url, Interval: &metav1.Duration{Duration: time.Hour}}}
	start := time.Now()
	if err := b.c.Create(b.ctx, gr); err != nil {
		return 0, err
	}
	for _, p := range paths {
		s := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sync-" + strings.ReplaceAll(p, "/", "-")},
			Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "repo"}, Path: p, Prune: ptr.To(true),
				TargetNamespace: ns, Interval: &metav1.Duration{Duration: time.Hour}}}
		if err := b.c.Create(b.ctx, s); err != nil {
			return 0, err
		}
	}
	deadline := time.Now().Add(15 * time.Minute)
	for {
		l := &gitopsv1alpha1.SyncList{}
		if err := b.c.List(b.ctx, l, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		ready := 0
		for i := range l.Items {
			if meta.IsStatusConditionTrue(l.Items[i].Status.Conditions, gitopsv1alpha1.ReadyCondition) {
				ready++
			}
		}
		if ready == len(paths) {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d/%d Syncs Ready after 15m", ready, len(paths))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drift edits ConfigMaps of the big Sync with another field manager and
// measures until each is restored.
func (b *bench) drift(ns string, edits int) []time.Duration {
	var out []time.Duration
	for i := range edits {
		name := fmt.Sprintf("obj%04d", (i*10)%*nObjects) // i%10==0: a ConfigMap
		cm := &corev1.ConfigMap{}
		if err := b.c.Get(b.ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			panic(err)
		}
		cm.Data["key"] = "edited-" + strconv.Itoa(i)
		start := time.Now()
		if err := b.c.Update(b.ctx, cm, client.FieldOwner("bench-intruder")); err != nil {
			panic(err)
		}
		for {
			got := &corev1.ConfigMap{}
			if err := b.c.Get(b.ctx, client.ObjectKeyFromObject(cm), got); err == nil && got.Data["key"] == "v" {
				break
			}
			if time.Since(start) > time.Minute {
				panic("drift not corrected within a minute")
			}
			time.Sleep(5 * time.Millisecond)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// pushes commits a change, posts a signed GitHub push webhook and measures
// until the change is applied.
func (b *bench) pushes(n int) ([]time.Duration, error) {
	ns := b.ns("push")
	url, err := gitfixture.Repo(b.root, "push", map[string][]*unstructured.Unstructured{"app": {configMap("pushed", "0")}})
	if err != nil {
		return nil, err
	}
	if err := b.c.Create(b.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"}, StringData: map[string]string{"token": "t"}}); err != nil {
		return nil, err
	}
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo",
		Annotations: map[string]string{receiver.SecretAnnotation: "hook"}},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: url, Interval: &metav1.Duration{Duration: time.Hour}}}
	if err := b.c.Create(b.ctx, gr); err != nil {
		return nil, err
	}
	s := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "repo"}, Path: "app", Prune: ptr.To(true),
			TargetNamespace: ns, Interval: &metav1.Duration{Duration: time.Hour}}}
	if err := b.c.Create(b.ctx, s); err != nil {
		return nil, err
	}
	wait := func(v string, since time.Time) error {
		for {
			cm := &corev1.ConfigMap{}
			if err := b.c.Get(b.ctx, client.ObjectKey{Namespace: ns, Name: "pushed"}, cm); err == nil && cm.Data["key"] == v {
				return nil
			}
			if time.Since(since) > time.Minute {
				return fmt.Errorf("push %s not applied within a minute", v)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := wait("0", time.Now()); err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := 1; i <= n; i++ {
		v := strconv.Itoa(i)
		if err := gitfixture.Write(filepath.Join(gitfixture.Dir(b.root, "push"), "app", "objects.yaml"), configMap("pushed", v)); err != nil {
			return nil, err
		}
		if err := gitfixture.Push(b.root, "push", v); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := gitfixture.Hook(b.ctx, b.receiverURL, ns, "repo", []byte("t")); err != nil {
			return nil, err
		}
		if err := wait(v, start); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

func pcts(d []time.Duration) string {
	if len(d) == 0 {
		return "n/a"
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	p := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d)", p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// median is the median of d.
func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)/2)]
}

// rssMiB reads the process's resident memory: in all, anonymous (heap,
// stacks) and file-backed (the mapped binary).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.WriteHeapProfile(f)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
