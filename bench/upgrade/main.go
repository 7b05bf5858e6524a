// Command upgrade measures the MachineUpgrade controller on a local control
// plane (internal/testenv, the manager in this process, kwok): the time to
// upgrade -n KwokMachines, each with a MachineBMC, to a new image at each
// maxUnavailable of -max, against a floor measured in the same run:
//
//   - the floor: a plain Go loop, -max workers, doing per Machine what the
//     steps do (cordon, evict the Node's Pods, patch image/version/boot,
//     Redfish PowerCycle through the Machine's BMC, wait until the Machine
//     is back with the new image on a Ready Node, uncordon), with one client
//     at the controller's API budget (20 QPS, burst 30) and no checkpoint;
//   - the controller: one MachineUpgrade with that maxUnavailable, from its
//     creation until phase Succeeded.
//
// It prints the times, their ratio and the time the state machine adds per
// Machine (mostly its checkpoint writes, about 16 per Machine, at the same
// budget). It asserts nothing. Run it from the repository root:
//
//	go run ./bench/upgrade -n 100 -max 1,10,25
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
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

	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/bench/internal/fleet"
	"github.com/converge-dev/converge/bench/internal/floors"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

const ns = "bench-upgrade"

func main() {
	n := flag.Int("n", 100, "KwokMachines (each with a MachineBMC)")
	maxList := flag.String("max", "1,10,25", "maxUnavailable values, comma-separated")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	var maxes []int
	for _, f := range strings.Split(*maxList, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			fmt.Fprintln(os.Stderr, "upgrade: -max: want positive integers")
			os.Exit(2)
		}
		maxes = append(maxes, v)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *n, maxes)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "upgrade:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func run(ctx context.Context, n int, maxes []int) error {
	env, err := testenv.Start(ctx, testenv.Options{Nodes: 1, Manager: func(o *setup.Options) {
		o.Controllers = []string{"machine", "kwokmachine", "machinebmc", "machineupgrade"}
	}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	logf("fleet: %d KwokMachines with Machines and MachineBMCs", n)
	t0 := time.Now()
	if err := createFleet(ctx, env.Client, n); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	logf("fleet ready in %v", time.Since(t0).Round(time.Millisecond))

	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 20, 30 // the machineupgrade controller's budget
	fc, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		return err
	}
	for i, mu := range maxes {
		image, version := fmt.Sprintf("floor%d", i), fmt.Sprintf("f.%d", i)
		logf("floor: maxUnavailable %d, to %s", mu, image)
		floor, err := floors.MachineUpgrade(ctx, fc, ns, names(n), mu, image, version, fleet.User, fleet.Password)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		image, version = fmt.Sprintf("up%d", i), fmt.Sprintf("u.%d", i)
		logf("controller: maxUnavailable %d, to %s", mu, image)
		took, err := fleet.Upgrade(ctx, env.Client, ns, fmt.Sprintf("up-%d", i), pool, n, mu, image, version)
		if err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		perMachine := (took - floor) / time.Duration(n)
		fmt.Printf("  maxUnavailable %2d: floor %v, MachineUpgrade %v (ratio %.2f), %v per Machine added by the state machine\n",
			mu, floor.Round(time.Millisecond), took.Round(time.Millisecond), took.Seconds()/floor.Seconds(), perMachine.Round(time.Millisecond))
		benchout.Line(fmt.Sprintf("upgrade.floor_%d_max%d", n, mu), floor.Seconds(), "s")
		benchout.Ratio(fmt.Sprintf("upgrade.kwok_%d_max%d", n, mu), took.Seconds(), "s", took.Seconds()/floor.Seconds())
	}
	return nil
}

func name(i int) string { return fmt.Sprintf("m-%03d", i) }

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = name(i)
	}
	return out
}

var pool = map[string]string{"pool": "bench"}

func createFleet(ctx context.Context, c client.Client, n int) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := fleet.Machines(ctx, c, ns, names(n), pool); err != nil {
		return err
	}
	if err := fleet.BMCs(ctx, c, ns, names(n)); err != nil {
		return err
	}
	return fleet.WaitUntil(ctx, c, ns, 500*time.Millisecond, func(f fleet.Counts) bool { return f.Running+f.BMCsReady == 2*n })
}
