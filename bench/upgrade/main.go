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
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/drain"
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
	if err := fleet(ctx, env.Client, n); err != nil {
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
		floor, err := floorLoop(ctx, fc, n, mu, image, version)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		image, version = fmt.Sprintf("up%d", i), fmt.Sprintf("u.%d", i)
		logf("controller: maxUnavailable %d, to %s", mu, image)
		took, err := upgrade(ctx, env.Client, fmt.Sprintf("up-%d", i), n, mu, image, version)
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

func fleet(ctx context.Context, c client.Client, n int) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	for i := range n {
		nm := name(i)
		objs := []client.Object{
			&infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm}},
			&machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm, Labels: map[string]string{"pool": "bench"}},
				Spec: machinev1alpha1.MachineSpec{Image: "v1", Version: "1", InfrastructureRef: machinev1alpha1.InfrastructureReference{
					APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: nm}}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm + "-bmc"},
				Data: map[string][]byte{bmcv1alpha1.UsernameKey: []byte("admin"), bmcv1alpha1.PasswordKey: []byte("s3cret-bmc")}},
			&bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm}, Spec: bmcv1alpha1.MachineBMCSpec{
				MachineRef: bmcv1alpha1.LocalObjectReference{Name: nm}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: nm + "-bmc"},
				Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish}}},
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return err
			}
		}
	}
	for {
		ms := &machinev1alpha1.MachineList{}
		bs := &bmcv1alpha1.MachineBMCList{}
		if err := c.List(ctx, ms, client.InNamespace(ns)); err != nil {
			return err
		}
		if err := c.List(ctx, bs, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, m := range ms.Items {
			if m.Status.Phase == machinev1alpha1.PhaseRunning && m.Status.NodeRef != nil {
				ready++
			}
		}
		for _, b := range bs.Items {
			if meta.IsStatusConditionTrue(b.Status.Conditions, bmcv1alpha1.ReadyCondition) {
				ready++
			}
		}
		if ready == 2*n {
			return nil
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// floorLoop upgrades every Machine by hand, mu at a time.
func floorLoop(ctx context.Context, c client.Client, n, mu int, image, version string) (time.Duration, error) {
	// Verified as the controller verifies them: against the BMC CA.
	pool, perr := (&bmc.CATrust{Key: setup.BMCOptions{}.CASecretKey(), Cache: c, Live: c}).Pool(ctx)
	if perr != nil {
		return 0, perr
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	start := time.Now()
	work := make(chan int)
	errs := make(chan error, mu)
	var wg sync.WaitGroup
	for range mu {
		wg.Go(func() {
			for i := range work {
				if err := byHand(ctx, c, hc, name(i), image, version); err != nil {
					errs <- fmt.Errorf("%s: %w", name(i), err)
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range n {
		select {
		case work <- i:
		case err = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return time.Since(start), err
}

func byHand(ctx context.Context, c client.Client, hc *http.Client, nm, image, version string) error {
	m := &machinev1alpha1.Machine{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: nm}, m); err != nil {
		return err
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: m.Status.NodeRef.Name}, node); err != nil {
		return err
	}
	if _, err := drain.Cordon(ctx, c, node); err != nil {
		return err
	}
	if _, err := drain.Evict(ctx, c, c, node.Name); err != nil {
		return err
	}
	raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"image": image, "version": version, "bootDevice": "Network", "bootOnce": true}})
	if err := c.Patch(ctx, m, client.RawPatch(types.MergePatchType, raw)); err != nil {
		return err
	}
	b := &bmcv1alpha1.MachineBMC{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: nm}, b); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.Status.RedfishEndpoint+"/redfish/v1/Systems/"+nm+"/Actions/ComputerSystem.Reset",
		strings.NewReader(`{"ResetType":"PowerCycle"}`))
	if err != nil {
		return err
	}
	req.SetBasicAuth("admin", "s3cret-bmc")
	req.Header.Set("Content-Type", "application/json")
	rsp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, rsp.Body)
	_ = rsp.Body.Close()
	if rsp.StatusCode/100 != 2 {
		return fmt.Errorf("redfish reset: %s", rsp.Status)
	}
	for {
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: nm}, m); err != nil {
			return err
		}
		if m.EffectivePowerState() != machinev1alpha1.PowerOn || m.Status.PowerState != machinev1alpha1.PowerOn || m.Status.Phase != machinev1alpha1.PhaseRunning {
			continue
		}
		if err := c.Get(ctx, types.NamespacedName{Name: node.Name}, node); err != nil {
			return err
		}
		if node.Annotations[upgradev1alpha1.BootedImageAnnotation] == image && ready(node) {
			break
		}
	}
	_, err = drain.Uncordon(ctx, c, node)
	return err
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// upgrade creates a MachineUpgrade and waits until it Succeeded.
func upgrade(ctx context.Context, c client.Client, nm string, n, mu int, image, version string) (time.Duration, error) {
	u := &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm},
		Spec: upgradev1alpha1.MachineUpgradeSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "bench"}},
			Image:    image, Version: version,
			Strategy: upgradev1alpha1.UpgradeStrategy{MaxUnavailable: int32(mu)}, //nolint:gosec // small
		}}
	start := time.Now()
	if err := c.Create(ctx, u); err != nil {
		return 0, err
	}
	for {
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return 0, err
		}
		switch u.Status.Phase {
		case upgradev1alpha1.PhaseSucceeded:
			if u.Status.Done != fmt.Sprintf("%d/%d", n, n) {
				return 0, fmt.Errorf("succeeded with %s done", u.Status.Done)
			}
			return time.Since(start), nil
		case upgradev1alpha1.PhaseFailed, upgradev1alpha1.PhaseAborted:
			return 0, errors.New("upgrade " + string(u.Status.Phase) + ": " + meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.ReadyCondition).Message)
		}
	}
}
