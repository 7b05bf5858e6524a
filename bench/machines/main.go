// Command machines measures the Machine and KwokMachine controllers, and
// real QEMU boots, on a local control plane (internal/testenv, the manager
// in this process):
//
//   - the floor: a plain client loop registering -n kwok Nodes at the
//     controllers' API budget (20 QPS, burst 30), until kwok has them all
//     Ready;
//   - -n KwokMachines and Machines created through the API server until
//     every Machine is Running with a Ready Node; and the ratio of the two;
//   - the manager's resident memory with those Machines;
//   - QemuMachine boots (-qemu runs, user-mode networking): from QEMU's start
//     to the first console line and to the DHCP lease printed (p50).
//
// It prints figures and asserts nothing. Run it from the repository root:
//
//	go run ./bench/machines -n 1000 -qemu 5
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/apicount"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/bench/internal/floors"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

func main() {
	n := flag.Int("n", 1000, "KwokMachines (and Nodes for the floor)")
	qemuRuns := flag.Int("qemu", 5, "QemuMachine boots to time; 0 skips them")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *n, *qemuRuns)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "machines:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func run(ctx context.Context, n, qemuRuns int) error {
	env, err := testenv.Start(ctx, testenv.Options{Nodes: 1, Manager: func(o *setup.Options) {
		o.Controllers = []string{"machine", "kwokmachine"}
	}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 20, 30
	floorClient, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		return err
	}
	logf("floor: registering %d kwok Nodes in a loop at 20 QPS", n)
	floor, err := floors.KwokNodes(ctx, floorClient, "floor", n)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	fmt.Printf("  floor: %d Nodes registered and Ready: %v\n", n, floor.Round(time.Millisecond))
	benchout.Line(fmt.Sprintf("machines.floor_%d_nodes", n), floor.Seconds(), "s")

	ns := "bench-machines"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	logf("controllers: %d KwokMachines and Machines", n)
	before, err := apicount.Scrape(ctx, env.Clientset)
	if err != nil {
		return err
	}
	took, err := machines(ctx, env.Client, ns, n)
	if err != nil {
		return err
	}
	time.Sleep(time.Second) // let trailing writes land in the count
	after, err := apicount.Scrape(ctx, env.Clientset)
	if err != nil {
		return err
	}
	// The controllers' writes (the benchmark's own creates subtracted):
	// what their budget is spent on; the floor writes one Node per machine.
	writes := after.Minus(before).Writes("machines", "kwokmachines", "nodes", "events")
	fmt.Printf("  API writes for %d Machines: %s\n", n, writes)
	// Not the controllers': the benchmark's creates, kwok's Node status.
	delete(writes, "POST machines")
	delete(writes, "POST kwokmachines")
	delete(writes, "PATCH nodes/status")
	benchout.Line("machines.writes_per_machine", writes.Total()/float64(n), "")
	fmt.Printf("  %d Machines Running with a Ready Node: %v (ratio %.2f)\n", n, took.Round(time.Millisecond), took.Seconds()/floor.Seconds())
	benchout.Ratio(fmt.Sprintf("machines.kwok_%d_running", n), took.Seconds(), "s", took.Seconds()/floor.Seconds())
	if kb, err := strconv.ParseFloat(strings.Fields(procStatus("VmRSS") + " x")[0], 64); err == nil {
		fmt.Printf("  process RSS with %d Machines: %.0f MiB\n", n, kb/1024)
		benchout.Line(fmt.Sprintf("machines.rss_%d", n), kb/1024, "MiB")
	}
	if qemuRuns > 0 {
		return boots(ctx, qemuRuns)
	}
	return nil
}

func machines(ctx context.Context, c client.Client, ns string, n int) (time.Duration, error) {
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("m-%d", i)
		if err := c.Create(ctx, &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			return 0, err
		}
		if err := c.Create(ctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
				APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: name}}}); err != nil {
			return 0, err
		}
	}
	for {
		list := &machinev1alpha1.MachineList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		done := 0
		for _, m := range list.Items {
			if m.Status.Phase == machinev1alpha1.PhaseRunning && m.Status.NodeRef != nil && healthy(&m) {
				done++
			}
		}
		if done == n {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func healthy(m *machinev1alpha1.Machine) bool {
	for _, c := range m.Status.Conditions {
		if c.Type == machinev1alpha1.NodeHealthyCondition && c.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

// boots times QEMU starts of the test image (user-mode networking, whose
// DHCP answers at once).
func boots(ctx context.Context, runs int) error {
	dir, err := qemu.TestImageDir()
	if err != nil {
		return err
	}
	if err := qemu.BuildBusyboxImage(ctx, dir, "busybox"); err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "cvbm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	h := &qemu.Host{StateDir: state, ImageDir: dir}
	var first, lease []time.Duration
	for i := range runs {
		id := fmt.Sprintf("bench/%d", i)
		start := time.Now()
		if _, err := h.Start(ctx, qemu.Spec{ID: id, Image: "busybox", Boot: qemu.BootDisk,
			NICs: []qemu.NIC{{Name: "eth0", Network: "lan", MAC: "02:00:00:00:09:01"}}}); err != nil {
			return err
		}
		var tFirst time.Duration
		for time.Since(start) < 3*time.Minute {
			b, _ := os.ReadFile(h.ConsoleLog(id))
			if tFirst == 0 && len(strings.TrimSpace(string(b))) > 0 {
				tFirst = time.Since(start)
			}
			if strings.Contains(string(b), qemu.LeaseMarker) {
				first, lease = append(first, tFirst), append(lease, time.Since(start))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := h.Remove(ctx, id, nil); err != nil {
			return err
		}
	}
	if len(lease) == 0 {
		return fmt.Errorf("no boot printed a lease")
	}
	fmt.Printf("  QEMU start -> first console line p50 %v, -> DHCP lease p50 %v (%d runs)\n", p50(first), p50(lease), len(lease))
	benchout.Line("machines.qemu_first_console_line_p50", p50(first).Seconds(), "s")
	benchout.Line("machines.qemu_dhcp_lease_p50", p50(lease).Seconds(), "s")
	return nil
}

func p50(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func procStatus(key string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key+":") {
			return strings.TrimSpace(strings.TrimPrefix(line, key+":"))
		}
	}
	return "?"
}
