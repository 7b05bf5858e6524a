// Command certificates measures N Certificates from a CA Issuer to all Ready
// on a local control plane, against a floor measured in the same run: a
// plain Go loop doing the same key generation, signing and Secret creation,
// with the same concurrency (8) and the same client-side API budget as the
// certificate controller (-qps, -burst). It prints BENCH lines (total time
// and ratio to the floor, p50/p99 issue latency, the manager's memory with
// many unrelated Secrets) and asserts nothing. The manager is `converge
// run` built from this tree, a process of its own (-manager in-process runs
// it inside this process, as the test suites do). From the repository root
// (after `make tools`):
//
//	go run ./bench/certificates -n 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/apicount"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/bench/internal/floors"
	"github.com/converge-dev/converge/bench/internal/managerproc"
	"github.com/converge-dev/converge/bench/internal/par"
	"github.com/converge-dev/converge/bench/internal/procmem"
	"github.com/converge-dev/converge/internal/controller/certificate"
	"github.com/converge-dev/converge/internal/controller/certificaterequest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

func main() {
	n := flag.Int("n", 1000, "Certificates")
	qps := flag.Float64("qps", 50, "client-side QPS of the certificate and certificaterequest controllers, and of the floor")
	burst := flag.Int("burst", 100, "client-side burst, as -qps")
	alg := flag.String("algorithm", pkiv1alpha1.ECDSAKeyAlgorithm, "key algorithm (RSA makes the crypto dominate)")
	timeout := flag.Duration("timeout", 20*time.Minute, "give up after this long")
	secrets := flag.Int("secrets", 10000, "unrelated 10 KiB Secrets created after the Certificates are Ready, before the memory is read")
	allData := flag.Bool("all-secret-data", false, "run the manager with --cache-all-secret-data (every Secret's data cached)")
	mode := flag.String("manager", "process", "where the manager runs: 'process' (`converge run` built from this tree, its own process; the memory line is that process's) or 'in-process' (in this benchmark's process, beside its client, as the test suites run it)")
	exe := flag.String("converge", "", "the converge binary to run (-manager process); empty builds one from this tree as `make build` does")
	heapProfile := flag.String("heapprofile", "", "save the manager's heap profile (-manager process) to this file when its memory is read")
	flag.Parse()
	keyAlgorithm = *alg
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if *mode != "process" && *mode != "in-process" {
		fmt.Fprintf(os.Stderr, "certificates: -manager %q: want process or in-process\n", *mode)
		os.Exit(2)
	}
	err := run(ctx, *n, float32(*qps), *burst, *alg, *timeout, *secrets, *allData, *mode == "in-process", *exe, *heapProfile)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "certificates:", err)
		os.Exit(1)
	}
}

const workers = 8

func run(ctx context.Context, n int, qps float32, burst int, alg string, timeout time.Duration, secrets int, allData, inProcess bool, exe, heapProfile string) error {
	var mgr *managerproc.Manager
	root, err := os.MkdirTemp("", "bench-certificates-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if !inProcess {
		fmt.Fprintln(os.Stderr, "building converge")
		if exe, err = managerproc.Build(ctx, exe, root); err != nil {
			return err
		}
	}
	controllers := []string{"issuer", "certificaterequest", "certificate"}
	fmt.Fprintf(os.Stderr, "starting the local control plane; %d Certificates (%s), budget %v QPS / burst %d, %d workers\n", n, alg, qps, burst, workers)
	env, err := testenv.Start(ctx, testenv.Options{NoManager: !inProcess, Manager: func(o *setup.Options) {
		o.Controllers = controllers
		o.KubeAPIQPS = map[string]float32{certificate.ControllerName: qps, certificaterequest.ControllerName: qps}
		o.KubeAPIBurst = map[string]int{certificate.ControllerName: burst, certificaterequest.ControllerName: burst}
		o.CacheAllSecretData = allData
	}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	if !inProcess {
		// The same controllers and budgets, as `converge run` flags; this
		// process serves the admission webhooks only.
		args := []string{"--controllers", strings.Join(controllers, ","),
			fmt.Sprintf("--kube-api-qps=%s=%v,%s=%v", certificate.ControllerName, qps, certificaterequest.ControllerName, qps),
			fmt.Sprintf("--kube-api-burst=%s=%d,%s=%d", certificate.ControllerName, burst, certificaterequest.ControllerName, burst),
			fmt.Sprintf("--cache-all-secret-data=%t", allData), "--receiver-bind-address", "0"}
		if mgr, err = managerproc.Start(env, exe, root, args...); err != nil {
			return err
		}
		defer func() { _ = mgr.Stop() }()
		fmt.Fprintf(os.Stderr, "manager: converge run, pid %d\n", mgr.Pid())
	}
	for _, ns := range []string{"floor", "converge"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	ca, err := floors.NewCA()
	if err != nil {
		return err
	}
	caSecret := ca.Secret

	// Floor: the same work by a plain loop, same workers and budget.
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = qps, burst
	fc, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return err
	}
	spec := func(i int) *pkiv1alpha1.CertificateSpec {
		return &pkiv1alpha1.CertificateSpec{SecretName: fmt.Sprintf("c%d-tls", i), DNSNames: []string{fmt.Sprintf("c%d.example.com", i)},
			PrivateKey: &pkiv1alpha1.CertificatePrivateKey{Algorithm: alg}, IssuerRef: pkiv1alpha1.IssuerReference{Name: "ca"}}
	}
	floor, err := floors.Certificates(ctx, fc, ca, "floor", n, workers, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "floor: %s\n", floor)

	// Converge: a ca Issuer and N Certificates.
	caSecret.Namespace = "converge"
	if err := env.Client.Create(ctx, caSecret); err != nil {
		return err
	}
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: "converge", Name: "ca"}, Spec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: "ca"}}}
	if err := env.Client.Create(ctx, iss); err != nil {
		return err
	}
	for !meta.IsStatusConditionTrue(iss.Status.Conditions, pkiv1alpha1.ReadyCondition) {
		time.Sleep(100 * time.Millisecond)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(iss), iss); err != nil {
			return err
		}
	}
	before, err := apicount.Scrape(ctx, env.Clientset)
	if err != nil {
		return err
	}
	created := make([]time.Time, n)
	start := time.Now()
	if err := par.Do(workers, n, func(i int) error {
		created[i] = time.Now()
		return env.Client.Create(ctx, &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "converge", Name: fmt.Sprintf("c%d", i)}, Spec: *spec(i)})
	}); err != nil {
		return err
	}
	readyAt := map[string]time.Time{}
	deadline := time.Now().Add(timeout)
	for len(readyAt) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Ready after %s", len(readyAt), n, timeout)
		}
		var l pkiv1alpha1.CertificateList
		if err := env.Client.List(ctx, &l, client.InNamespace("converge")); err != nil {
			return err
		}
		now := time.Now()
		for _, c := range l.Items {
			if _, ok := readyAt[c.Name]; !ok && meta.IsStatusConditionTrue(c.Status.Conditions, pkiv1alpha1.ReadyCondition) {
				readyAt[c.Name] = now
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	total := time.Since(start)
	// Let trailing writes land in the count: Events go out on the
	// manager's own budget (20 QPS), behind the controllers, so wait until
	// the count stops moving (at most a minute).
	after, err := apicount.Scrape(ctx, env.Clientset)
	if err != nil {
		return err
	}
	for settle := time.Now().Add(time.Minute); time.Now().Before(settle); {
		time.Sleep(2 * time.Second)
		again, err := apicount.Scrape(ctx, env.Clientset)
		if err != nil {
			return err
		}
		moved := again.Minus(after).Writes("certificates", "certificaterequests", "secrets", "events").Total() > 0
		after = again
		if !moved {
			break
		}
	}
	// The controllers' writes: what the client-side budget is spent on.
	writes := after.Minus(before).Writes("certificates", "certificaterequests", "secrets", "events")
	fmt.Fprintf(os.Stderr, "API writes for %d Certificates: %s\n", n, writes)
	// Uncached reads of the controllers (the benchmark's own polling LIST
	// of Certificates included), which spend the same budgets.
	reads := after.Minus(before).Reads("certificates", "certificaterequests", "secrets")
	fmt.Fprintf(os.Stderr, "API reads for %d Certificates: %s\n", n, reads)
	lat := make([]float64, 0, n)
	for i := range n {
		lat = append(lat, readyAt[fmt.Sprintf("c%d", i)].Sub(created[i]).Seconds())
	}
	sort.Float64s(lat)
	benchout.Line(prefix(allData)+".floor_seconds", floor.Seconds(), "s")
	benchout.Ratio(prefix(allData)+".all_ready_seconds", total.Seconds(), "s", total.Seconds()/floor.Seconds())
	benchout.Line(prefix(allData)+".p50_issue_seconds", lat[len(lat)/2], "s")
	benchout.Line(prefix(allData)+".p99_issue_seconds", lat[len(lat)*99/100], "s")
	benchout.Line(prefix(allData)+".writes_per_certificate", (writes.Total()-float64(n))/float64(n), "")
	benchout.Line(prefix(allData)+".gets_per_certificate", reads.Minus(apicount.Counts{"LIST certificates": reads["LIST certificates"]}).Total()/float64(n), "")
	return memory(ctx, env.Client, n, secrets, allData, mgr, heapProfile)
}

// keyAlgorithm is -algorithm.
var keyAlgorithm = pkiv1alpha1.ECDSAKeyAlgorithm

// prefix names the BENCH lines: a run with every Secret's data cached is
// another series, and so is one with another key than ECDSA (RSA: the
// crypto, not the API budget, dominates the floor).
func prefix(allData bool) string {
	p := "certificates"
	if allData {
		p = "certificates_all_secret_data"
	}
	if keyAlgorithm != pkiv1alpha1.ECDSAKeyAlgorithm {
		p += "_" + strings.ToLower(keyAlgorithm)
	}
	return p
}

// memory creates secrets unrelated 10 KiB Secrets, lets the manager's
// informer take them in, and prints the manager's memory: the `converge
// run` process's as read (mgr), or this process's, where the manager and
// this benchmark's client are one process (-manager in-process); the
// control plane is not counted. The manager's heap profile is saved to
// heapProfile unless it is empty.
func memory(ctx context.Context, c client.Client, n, secrets int, allData bool, mgr *managerproc.Manager, heapProfile string) error {
	if secrets > 0 {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}); err != nil {
			return err
		}
		data := []byte(strings.Repeat("x", 10<<10))
		if err := par.Do(workers, secrets, func(i int) error {
			return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "unrelated", Name: fmt.Sprintf("s%05d", i)},
				Data: map[string][]byte{"blob": data}})
		}); err != nil {
			return err
		}
	}
	time.Sleep(5 * time.Second) // the informer takes them in
	mode := "data cached only for labelled Secrets and Secrets of at most 1 KiB (default)"
	if allData {
		mode = "every Secret's data cached (--cache-all-secret-data)"
	}
	if mgr != nil {
		line, m, err := mgr.Describe(heapProfile)
		if err != nil {
			return err
		}
		h, err := mgr.Heap("")
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "memory with %d Certificates and %d unrelated 10 KiB Secrets, %s: %s\n", n, secrets, mode, line)
		benchout.Line(fmt.Sprintf("%s.rss_%d_secrets", prefix(allData), secrets), float64(m.RSS), "MiB")
		benchout.Line(fmt.Sprintf("%s.rss_anon_%d_secrets", prefix(allData), secrets), float64(m.Anon), "MiB")
		benchout.Line(fmt.Sprintf("%s.heap_%d_secrets", prefix(allData), secrets), float64(h.InUse>>20), "MiB")
		return nil
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, anon, _ := procmem.RSS()
	debug.FreeOSMemory()
	after, _, _ := procmem.RSS()
	fmt.Fprintf(os.Stderr, "memory with %d Certificates and %d unrelated 10 KiB Secrets, %s: this process (the manager, the benchmark's client and its code): RSS %d MiB as read after a GC (anonymous %d), %d MiB after returning freed memory, Go heap in use %d MiB\n",
		n, secrets, mode, rss, anon, after, ms.HeapInuse>>20)
	benchout.Line(fmt.Sprintf("%s.inprocess_rss_%d_secrets", prefix(allData), secrets), float64(rss), "MiB")
	benchout.Line(fmt.Sprintf("%s.inprocess_heap_%d_secrets", prefix(allData), secrets), float64(ms.HeapInuse>>20), "MiB")
	return nil
}
