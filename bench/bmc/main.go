// Command bmc measures the virtual BMCs (MachineBMC) on a local control
// plane (internal/testenv, the manager in this process), with KwokMachines:
//
//   - the floor: UDP round trips to an echo server in this process (one Go
//     client, one socket);
//   - IPMI Get Chassis Status round trips in one open session against one
//     BMC (Go client), and the ratio to the floor;
//   - `ipmitool -I lanplus -C 17 power status` (a whole session per call:
//     process start, RAKP, command, close) against one BMC, and against -n
//     BMCs at once (-workers calls in parallel spread over them);
//   - Redfish GET of the ComputerSystem under 50 concurrent Go clients
//     (basic authentication, keep-alive): p99;
//   - IPMI power on -> Machine status On (p50, p99 of -power runs);
//   - the process's resident memory with -rss-n BMCs (0 skips).
//
// Every figure is lower-is-better time per operation. Run it from the
// repository root:
//
//	go run ./bench/bmc -n 100 -rss-n 1000
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/internal/bmc/ipmi"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

func main() {
	n := flag.Int("n", 100, "BMCs for the many-BMC ipmitool figure")
	workers := flag.Int("workers", 4, "ipmitool calls in parallel against the n BMCs")
	calls := flag.Int("calls", 200, "ipmitool calls per ipmitool figure")
	rtt := flag.Duration("rtt", 3*time.Second, "how long to run the Go client and echo round trips")
	redfishFor := flag.Duration("redfish", 5*time.Second, "how long the 50 Redfish clients run")
	power := flag.Int("power", 20, "power on -> status On runs")
	rssN := flag.Int("rss-n", 0, "BMCs for the RSS figure (0 skips)")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *n, *workers, *calls, *rtt, *redfishFor, *power, *rssN)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bmc:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

const ns = "bench-bmc"

func run(ctx context.Context, n, workers, calls int, rtt, redfishFor time.Duration, power, rssN int) error {
	if _, err := exec.LookPath("ipmitool"); err != nil {
		return errors.New("ipmitool is not installed (apt-get install ipmitool)")
	}
	env, err := testenv.Start(ctx, testenv.Options{Nodes: 1, Manager: func(o *setup.Options) {
		o.Controllers = []string{"machine", "kwokmachine", "machinebmc"}
		// The bench measures the BMCs, not the client-side budget.
		o.KubeAPIQPS = map[string]float32{"": -1}
	}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc"},
		StringData: map[string]string{"username": "admin", "password": "bench-bmc"}}); err != nil {
		return err
	}

	// Floor: UDP echo in this process.
	echo, err := udpEcho(ctx)
	if err != nil {
		return err
	}
	floor, err := roundTrips(ctx, rtt, func() error { return echo.ping() })
	if err != nil {
		return err
	}
	fmt.Printf("  floor: UDP echo round trip %v (%.0f/s)\n", floor, 1/floor.Seconds())
	benchout.Line("bmc.floor_udp_echo", us(floor), "us")

	logf("creating %d Machines and MachineBMCs", n)
	t0 := time.Now()
	bmcs, err := create(ctx, c, 0, n)
	if err != nil {
		return err
	}
	took := time.Since(t0)
	fmt.Printf("  %d MachineBMCs Ready (each probed through IPMI and Redfish): %v\n", n, took.Round(time.Millisecond))
	benchout.Line(fmt.Sprintf("bmc.ready_%d", n), took.Seconds(), "s")
	one := bmcs[0]

	// IPMI round trips in one session.
	cl, err := ipmi.Dial(ctx, one.Status.IPMIEndpoint, "admin", "bench-bmc", ipmi.CipherSuite17)
	if err != nil {
		return err
	}
	per, err := roundTrips(ctx, rtt, func() error { _, err := cl.PowerStatus(ctx); return err })
	_ = cl.Close(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("  IPMI Get Chassis Status in a session, one BMC: %v (%.0f/s, ratio %.2f to the echo)\n", per, 1/per.Seconds(), per.Seconds()/floor.Seconds())
	benchout.Ratio("bmc.ipmi_power_status_rtt", us(per), "us", per.Seconds()/floor.Seconds())

	// ipmitool: a whole session per call.
	perCall, err := ipmitoolRate(ctx, bmcs[:1], 1, calls/4)
	if err != nil {
		return err
	}
	fmt.Printf("  ipmitool power status, one BMC, sequential: %v per call (%.1f/s)\n", perCall, 1/perCall.Seconds())
	benchout.Ratio("bmc.ipmitool_power_status_1", ms(perCall), "ms", perCall.Seconds()/floor.Seconds())
	perCallN, err := ipmitoolRate(ctx, bmcs, workers, calls)
	if err != nil {
		return err
	}
	fmt.Printf("  ipmitool power status, %d BMCs, %d in parallel: %v per call (%.1f/s)\n", n, workers, perCallN, 1/perCallN.Seconds())
	benchout.Line(fmt.Sprintf("bmc.ipmitool_power_status_%d", n), ms(perCallN), "ms")

	// Redfish GET p99 under 50 clients.
	p50, p99, count, err := redfishLoad(ctx, one, 50, redfishFor)
	if err != nil {
		return err
	}
	fmt.Printf("  Redfish GET ComputerSystem, 50 clients: %d requests in %v, p50 %v, p99 %v\n", count, redfishFor, p50, p99)
	benchout.Line("bmc.redfish_get_p99_50_clients", ms(p99), "ms")

	// power on -> status On.
	lat, err := powerOn(ctx, c, bmcs, power)
	if err != nil {
		return err
	}
	fmt.Printf("  IPMI power on -> Machine status On (%d runs): p50 %v, p99 %v\n", len(lat), pct(lat, 50), pct(lat, 99))
	benchout.Line("bmc.power_on_status_p50", ms(pct(lat, 50)), "ms")
	benchout.Line("bmc.power_on_status_p99", ms(pct(lat, 99)), "ms")

	if rssN > n {
		logf("creating %d more MachineBMCs for the RSS figure", rssN-n)
		if _, err := create(ctx, c, n, rssN); err != nil {
			return err
		}
		if kb, err := strconv.ParseFloat(strings.Fields(procStatus("VmRSS") + " x")[0], 64); err == nil {
			fmt.Printf("  process RSS (control plane clients, manager, %d BMCs): %.0f MiB\n", rssN, kb/1024)
			benchout.Line(fmt.Sprintf("bmc.rss_%d", rssN), kb/1024, "MiB")
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}

type echoServer struct{ c net.Conn }

func udpEcho(ctx context.Context) (*echoServer, error) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		_ = pc.Close()
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, a, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], a)
		}
	}()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		return nil, err
	}
	return &echoServer{c: c}, nil
}

// ping sends a packet the size of a Get Chassis Status request.
func (e *echoServer) ping() error {
	b := make([]byte, 64)
	if _, err := e.c.Write(b); err != nil {
		return err
	}
	_ = e.c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := e.c.Read(b)
	return err
}

// roundTrips runs f for d and returns the mean time per call.
func roundTrips(ctx context.Context, d time.Duration, f func() error) (time.Duration, error) {
	n := 0
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		if err := f(); err != nil {
			return 0, err
		}
		n++
	}
	return time.Since(start) / time.Duration(max(n, 1)), ctx.Err()
}

func create(ctx context.Context, c client.Client, from, to int) ([]*bmcv1alpha1.MachineBMC, error) {
	var out []*bmcv1alpha1.MachineBMC
	for i := from; i < to; i++ {
		name := fmt.Sprintf("m%d", i)
		if err := c.Create(ctx, &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			return nil, err
		}
		if err := c.Create(ctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
				APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: name}}}); err != nil {
			return nil, err
		}
		b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: bmcv1alpha1.MachineBMCSpec{
			MachineRef: bmcv1alpha1.LocalObjectReference{Name: name}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "bmc"}}}
		if err := c.Create(ctx, b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		l := &bmcv1alpha1.MachineBMCList{}
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		ready := map[string]bmcv1alpha1.MachineBMC{}
		for _, b := range l.Items {
			if meta.IsStatusConditionTrue(b.Status.Conditions, bmcv1alpha1.ReadyCondition) {
				ready[b.Name] = b
			}
		}
		all := true
		for i, b := range out {
			r, ok := ready[b.Name]
			if !ok {
				all = false
				break
			}
			out[i] = &r
		}
		ml := &machinev1alpha1.MachineList{}
		if err := c.List(ctx, ml, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		on := 0
		for _, m := range ml.Items {
			if m.Status.PowerState == machinev1alpha1.PowerOn {
				on++
			}
		}
		if all && on >= to {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d MachineBMCs Ready, %d Machines On after 10 minutes", len(ready), to, on)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ipmitoolRate(ctx context.Context, bmcs []*bmcv1alpha1.MachineBMC, workers, calls int) (time.Duration, error) {
	var mu sync.Mutex
	var firstErr error
	next := 0
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= calls || ctx.Err() != nil {
					return
				}
				h, p, _ := net.SplitHostPort(bmcs[i%len(bmcs)].Status.IPMIEndpoint)
				out, err := exec.CommandContext(ctx, "ipmitool", "-I", "lanplus", "-C", "17", "-H", h, "-p", p,
					"-U", "admin", "-P", "bench-bmc", "power", "status").CombinedOutput()
				if err == nil && !strings.Contains(string(out), "Chassis Power is") {
					err = fmt.Errorf("ipmitool: %s", out)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("ipmitool: %w: %s", err, out)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start) / time.Duration(calls), firstErr
}

func redfishLoad(ctx context.Context, b *bmcv1alpha1.MachineBMC, clients int, d time.Duration) (p50, p99 time.Duration, count int, err error) {
	url := b.Status.RedfishEndpoint + "/redfish/v1/Systems/" + b.Spec.MachineRef.Name
	//nolint:gosec // the BMC's certificate is self-signed, made at each start
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: clients}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				req.SetBasicAuth("admin", "bench-bmc")
				t0 := time.Now()
				rsp, err := hc.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, rsp.Body)
					_ = rsp.Body.Close()
					if rsp.StatusCode != http.StatusOK {
						err = fmt.Errorf("GET %s: %s", url, rsp.Status)
					}
				}
				el := time.Since(t0)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, el)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, 0, firstErr
	}
	return pct(lat, 50), pct(lat, 99), len(lat), nil
}

func powerOn(ctx context.Context, c client.Client, bmcs []*bmcv1alpha1.MachineBMC, runs int) ([]time.Duration, error) {
	var out []time.Duration
	for i := range runs {
		b := bmcs[i%len(bmcs)]
		key := client.ObjectKey{Namespace: ns, Name: b.Spec.MachineRef.Name}
		cl, err := ipmi.Dial(ctx, b.Status.IPMIEndpoint, "admin", "bench-bmc", ipmi.CipherSuite17)
		if err != nil {
			return nil, err
		}
		if err := cl.ChassisControl(ctx, ipmi.PowerDown); err != nil {
			return nil, err
		}
		if err := waitPower(ctx, c, key, machinev1alpha1.PowerOff); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := cl.ChassisControl(ctx, ipmi.PowerUp); err != nil {
			return nil, err
		}
		if err := waitPower(ctx, c, key, machinev1alpha1.PowerOn); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
		_ = cl.Close(ctx)
	}
	return out, nil
}

func waitPower(ctx context.Context, c client.Client, key client.ObjectKey, p machinev1alpha1.PowerState) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		m := &machinev1alpha1.Machine{}
		if err := c.Get(ctx, key, m); err != nil {
			return err
		}
		if m.Status.PowerState == p {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return fmt.Errorf("machine %s not %s after a minute", key, p)
}

func procStatus(field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
