// Command envtest measures how long it takes to start and stop a test control
// plane from the binaries in bin/, two ways:
//
//   - controller-runtime's envtest (etcd and kube-apiserver), the usual way
//     controller projects test against a real API server;
//   - Converge's own harness, internal/localcp, as internal/testenv uses it:
//     etcd and kube-apiserver only, and the full set (plus
//     kube-controller-manager, kube-scheduler and one kwok node, waited for
//     until Ready and schedulable).
//
// localcp serialises the bootstrap of the control planes on one machine (up
// to kube-apiserver ready); the part of its start spent waiting for another
// one (a test suite, a `converge up`) is shown as "of it lock wait". envtest
// takes no such lock: it competes for the CPU instead.
//
// Every run starts from an empty data directory, so each one mints its PKI,
// as envtest always does. The scenarios are interleaved run by run, so that
// background load spreads evenly over them.
//
// It prints figures and asserts nothing: the details of each run go to
// stderr, the summary (min / median / max) to stdout, which bench/up.sh
// copies into its final table. Run it from the repository root:
//
//	go run ./bench/envtest -runs 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/converge-dev/converge/internal/localcp"
)

// phase names, in the order they are printed.
const (
	phaseStart = "start"
	// phaseLock is the part of start spent waiting for another local control
	// plane on the machine to finish starting (localcp serialises that).
	phaseLock  = "of it lock wait"
	phaseReady = "nodes ready"
	phaseStop  = "stop"
)

// scenario is one way of bringing a control plane up and down.
type scenario struct {
	name string
	// run starts and stops once and returns the duration of each phase.
	run func(ctx context.Context, binDir string) (map[string]time.Duration, error)

	results map[string][]time.Duration
	errs    []error
}

func main() {
	runs := flag.Int("runs", 3, "number of runs of each scenario")
	binDir := flag.String("bin-dir", defaultBinDir(), "directory of the control-plane binaries (`make tools`)")
	flag.Parse()
	if *runs < 1 {
		fmt.Fprintln(os.Stderr, "envtest: -runs must be at least 1")
		os.Exit(2)
	}
	dir, err := filepath.Abs(*binDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "envtest:", err)
		os.Exit(2)
	}
	for _, b := range []string{localcp.Etcd, localcp.APIServer, localcp.ControllerManager, localcp.Scheduler, localcp.Kwok} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			fmt.Fprintf(os.Stderr, "envtest: %s missing in %s; run `make tools`\n", b, dir)
			os.Exit(2)
		}
	}
	// envtest prefers these over BinaryAssetsDirectory; we measure bin/.
	for _, v := range []string{"KUBEBUILDER_ASSETS", "TEST_ASSET_ETCD", "TEST_ASSET_KUBE_APISERVER", "TEST_ASSET_KUBECTL"} {
		_ = os.Unsetenv(v)
	}
	// envtest logs through controller-runtime; keep it quiet (and keep
	// controller-runtime from warning that no logger was set).
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))

	scenarios := []*scenario{
		{name: "envtest (etcd+apiserver)", run: runEnvtest},
		{name: "localcp (etcd+apiserver)", run: runLocalcp(false)},
		{name: "localcp full (1 node)", run: runLocalcp(true)},
	}
	// On Ctrl-C, finish (and stop) the control plane of the current run, then
	// report what was measured.
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	for _, s := range scenarios {
		s.results = map[string][]time.Duration{}
	}
	fmt.Fprintf(os.Stderr, "envtest bench: %d run(s) of each scenario, binaries in %s, %d CPU(s)\n", *runs, dir, runtime.NumCPU())
runs:
	for i := 1; i <= *runs; i++ {
		for _, s := range scenarios {
			if sigCtx.Err() != nil {
				fmt.Fprintln(os.Stderr, "  interrupted")
				break runs
			}
			ctx, cancel := context.WithTimeout(sigCtx, 3*time.Minute)
			before := children()
			phases, err := s.run(ctx, dir)
			cancel()
			left := subtract(children(), before)
			if err != nil {
				s.errs = append(s.errs, err)
				fmt.Fprintf(os.Stderr, "  run %d  %-27s FAILED: %v\n", i, s.name, err)
			} else {
				for k, d := range phases {
					s.results[k] = append(s.results[k], d)
				}
				fmt.Fprintf(os.Stderr, "  run %d  %-27s %s\n", i, s.name, formatPhases(phases))
			}
			if len(left) > 0 {
				fmt.Fprintf(os.Stderr, "  run %d  %-27s LEFT BEHIND after stop: %s\n", i, s.name, strings.Join(left, ", "))
			}
		}
	}

	failed := sigCtx.Err() != nil
	fmt.Println("envtest / localcp start and stop, median (min-max) over", *runs, "run(s):")
	for _, s := range scenarios {
		if len(s.errs) > 0 {
			failed = true
		}
		if len(s.results[phaseStart]) == 0 {
			if len(s.errs) > 0 {
				fmt.Printf("  %-27s FAILED: %v\n", s.name, s.errs[0])
			}
			continue
		}
		var parts []string
		for _, ph := range []string{phaseStart, phaseLock, phaseReady, phaseStop} {
			if ds := s.results[ph]; len(ds) > 0 && (ph != phaseLock || slices.Max(ds) > 0) {
				parts = append(parts, fmt.Sprintf("%s %s", ph, stats(ds)))
			}
		}
		line := fmt.Sprintf("  %-27s %s", s.name, strings.Join(parts, "   "))
		if len(s.errs) > 0 {
			line += fmt.Sprintf("   (%d run(s) failed: %v)", len(s.errs), s.errs[0])
		}
		fmt.Println(line)
	}
	if failed {
		stopSignals()
		os.Exit(1) //nolint:gocritic // signals were released just above
	}
}

// runEnvtest starts and stops controller-runtime's envtest on our binaries.
func runEnvtest(_ context.Context, binDir string) (map[string]time.Duration, error) {
	env := &envtest.Environment{BinaryAssetsDirectory: binDir}
	t0 := time.Now()
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start: %w", err)
	}
	start := time.Since(t0)
	t1 := time.Now()
	if err := env.Stop(); err != nil {
		return nil, fmt.Errorf("stop: %w", err)
	}
	return map[string]time.Duration{phaseStart: start, phaseStop: time.Since(t1)}, nil
}

// runLocalcp starts and stops internal/localcp the way internal/testenv
// does; full adds kube-controller-manager, kube-scheduler and one kwok node
// and waits until that node is Ready and schedulable.
func runLocalcp(full bool) func(context.Context, string) (map[string]time.Duration, error) {
	return func(ctx context.Context, binDir string) (_ map[string]time.Duration, retErr error) {
		dir, err := os.MkdirTemp("", "converge-bench-localcp-")
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := os.RemoveAll(dir); err != nil && retErr == nil {
				retErr = err
			}
		}()
		cfg := localcp.Config{DataDir: dir, BinDir: binDir, Ephemeral: true}
		if full {
			cfg.ControllerManager, cfg.Scheduler, cfg.Nodes = true, true, 1
		}
		var waitFrom, etcdFrom time.Time
		cfg.Progress = func(format string, args ...any) {
			switch msg := fmt.Sprintf(format, args...); {
			case strings.HasPrefix(msg, "waiting for another local control plane") && waitFrom.IsZero():
				waitFrom = time.Now()
			case msg == "starting "+localcp.Etcd && etcdFrom.IsZero():
				etcdFrom = time.Now()
			}
		}
		out := map[string]time.Duration{}
		t0 := time.Now()
		cp, err := localcp.Start(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
		out[phaseStart] = time.Since(t0)
		out[phaseLock] = 0
		if !waitFrom.IsZero() && !etcdFrom.IsZero() {
			out[phaseLock] = etcdFrom.Sub(waitFrom)
		}
		if full {
			if err := cp.WaitNodesReady(ctx); err != nil {
				_ = cp.Stop()
				return nil, fmt.Errorf("waiting for the node: %w", err)
			}
			out[phaseReady] = time.Since(t0)
		}
		t1 := time.Now()
		if err := cp.Stop(); err != nil {
			return nil, fmt.Errorf("stop: %w", err)
		}
		out[phaseStop] = time.Since(t1)
		return out, nil
	}
}

func formatPhases(p map[string]time.Duration) string {
	var parts []string
	for _, ph := range []string{phaseStart, phaseLock, phaseReady, phaseStop} {
		if d, ok := p[ph]; ok && (ph != phaseLock || d > 0) {
			parts = append(parts, fmt.Sprintf("%s %5.2f s", ph, d.Seconds()))
		}
	}
	return strings.Join(parts, "   ")
}

// stats formats "median (min-max)" in seconds.
func stats(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if len(s) == 1 {
		return fmt.Sprintf("%.2f s", med.Seconds())
	}
	return fmt.Sprintf("%.2f s (%.2f-%.2f)", med.Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
}

// children lists this process's live child processes as "name(pid)", from
// /proc (Linux); elsewhere it returns nothing.
func children() []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(data)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || fields[1] != self || fields[0] == "Z" {
			continue
		}
		comm := s[strings.IndexByte(s, '(')+1 : end]
		out = append(out, fmt.Sprintf("%s(%s)", comm, e.Name()))
	}
	return out
}

func subtract(now, before []string) []string {
	var out []string
	for _, c := range now {
		if !slices.Contains(before, c) {
			out = append(out, c)
		}
	}
	return out
}

// defaultBinDir mirrors `converge up`: $CONVERGE_BIN_DIR, else ./bin.
func defaultBinDir() string {
	if d := os.Getenv("CONVERGE_BIN_DIR"); d != "" {
		return d
	}
	return "bin"
}
