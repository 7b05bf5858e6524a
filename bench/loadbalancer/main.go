// Command loadbalancer measures Converge's LoadBalancer data plane and
// failover with real packets, in network namespaces it makes and removes
// (root only), against a local control plane with the loadbalancer-ipam
// controller and two agents (child processes in two node namespaces):
//
//   - wrk from a client namespace, keep-alive and a new connection per
//     request (Connection: close), straight to the backend (the floor),
//     routed through the announcing node without NAT (the hop's floor) and
//     through the VIP (ARP to the announcing node, DNAT, masquerade);
//     reported as microseconds per request, lower is better, with ratios
//     against direct and against routed;
//   - UDP round trips (one at a time) from the same client, the same three
//     ways, from one socket (one conntrack flow) and from a new socket per
//     request (a new flow each time);
//   - create → reachable: from creating a Service (and its EndpointSlice) to
//     LoadBalancerReady=True, which the agent sets only after a connection
//     through the VIP reached the backend (p50/p99 over -services);
//   - failover: kill the announcing agent and pull its node's cable, then
//     time until a client request through the VIP succeeds again (p50/p99
//     over -kills), against the agents' lease duration.
//
// It prints figures and asserts nothing. Run it from the repository root:
//
//	sudo go run ./bench/loadbalancer -services 100 -kills 20
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/internal/controller/lbipam"
	"github.com/converge-dev/converge/internal/lbagent"
	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

func main() {
	lbtest.MaybeRunAgentChild()
	services := flag.Int("services", 100, "Services for create → reachable (at most 136, the pool's size)")
	kills := flag.Int("kills", 20, "owner kills for the failover figure")
	dur := flag.Duration("wrk", 5*time.Second, "duration of each wrk run")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *services, *kills, *dur)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadbalancer:", err)
		os.Exit(1)
	}
}

// benchPool is the benchmark's pool: a part of lbtest.Subnet that no
// interface of the topology uses, large enough for -services 136.
const benchPool = "10.77.0.64-10.77.0.199"

func run(ctx context.Context, services, kills int, dur time.Duration) error {
	if !netns.IsRoot() {
		return errors.New("needs root: it makes network namespaces and nftables rules")
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk (Debian package wrk) is not installed: %w", err)
	}
	env, err := testenv.Start(ctx, testenv.Options{Manager: func(o *setup.Options) { o.Controllers = []string{lbipam.ControllerName} }})
	if err != nil {
		return err
	}
	defer env.Stop() //nolint:errcheck // best effort
	topo, err := lbtest.New(ctx, 2, 1)
	if err != nil {
		return err
	}
	defer topo.Close()
	be := topo.BackendIPs[0].String()
	if err := topo.ServeHTTP(topo.Backends[0], be+":8080", "be"); err != nil {
		return err
	}
	ns := "lbbench"
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: []string{benchPool}}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &lbv1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		return err
	}
	agents := make([]*lbtest.Agent, 2)
	spec := func(i int) lbtest.AgentSpec {
		return lbtest.AgentSpec{Kubeconfig: env.KubeconfigPath, NodeName: fmt.Sprintf("node-%d", i), NetNS: topo.Nodes[i],
			Interface: "eth0", LeaseNamespace: ns, ProbeInterval: 5 * time.Second}
	}
	for i := range agents {
		if agents[i], err = topo.StartAgent(spec(i)); err != nil {
			return err
		}
	}
	load := func() string {
		b, _ := os.ReadFile("/proc/loadavg")
		return strings.Join(strings.Fields(string(b))[:3], " ")
	}

	// Create → reachable.
	var lat []time.Duration
	for i := range services {
		name := fmt.Sprintf("s%03d", i)
		start := time.Now()
		if err := createService(ctx, c, ns, name, be); err != nil {
			return err
		}
		if _, err := waitReachable(ctx, c, ns, name, 60*time.Second); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
	}
	p50, p99 := pct(lat)
	fmt.Printf("create → reachable over %d Services: p50 %v p99 %v (load %s)\n", services, p50, p99, load())
	benchout.Line("loadbalancer.create_to_reachable_p50", ms(p50), "ms")
	benchout.Line("loadbalancer.create_to_reachable_p99", ms(p99), "ms")

	// Throughput: direct vs VIP, keep-alive and new connection per request.
	vip, err := waitReachable(ctx, c, ns, "s000", time.Minute)
	if err != nil {
		return err
	}
	// The routed floor: the same backend through the announcing node by
	// plain forwarding (no NAT), to tell the hop's cost from the rules'.
	owner, err := ownerOf(ctx, c, ns, "s000")
	if err != nil {
		return err
	}
	routed, err := topo.RoutedFloor(ctx, 0, owner)
	if err != nil {
		return err
	}
	if err := topo.ServeHTTP(topo.Backends[0], routed.String()+":8080", "be"); err != nil {
		return err
	}
	for _, mode := range []struct{ name, header string }{{"keepalive", ""}, {"newconn", "Connection: close"}} {
		direct, err := wrk(ctx, topo.Client, "http://"+be+":8080/", mode.header, dur)
		if err != nil {
			return err
		}
		hop, err := wrk(ctx, topo.Client, "http://"+routed.String()+":8080/", mode.header, dur)
		if err != nil {
			return err
		}
		through, err := wrk(ctx, topo.Client, "http://"+vip+":80/", mode.header, dur)
		if err != nil {
			return err
		}
		fmt.Printf("wrk %s: direct %.0f req/s, routed through the node %.0f req/s, through the VIP %.0f req/s (%.2f× direct, %.2f× routed) (load %s)\n",
			mode.name, direct, hop, through, through/direct, through/hop, load())
		benchout.Line("loadbalancer.direct_"+mode.name, 1e6/direct, "us/req")
		benchout.Ratio("loadbalancer.routed_"+mode.name, 1e6/hop, "us/req", direct/hop)
		benchout.Ratio("loadbalancer.vip_"+mode.name, 1e6/through, "us/req", direct/through)
		benchout.Ratio("loadbalancer.vip_vs_routed_"+mode.name, 1e6/through, "us/req", hop/through)
	}

	// UDP: request/response round trips from one socket (one flow: after
	// its first packet conntrack translates) and from a new socket per
	// request (every request a new flow through the nat chains).
	if err := createUDPService(ctx, c, ns, "udp", be); err != nil {
		return err
	}
	uvip, err := waitReachable(ctx, c, ns, "udp", time.Minute)
	if err != nil {
		return err
	}
	for _, addr := range []string{be, routed.String()} {
		if err := topo.ServeUDPEcho(topo.Backends[0], addr+":5353", "be"); err != nil {
			return err
		}
	}
	for _, mode := range []struct {
		name    string
		newFlow bool
	}{{"oneflow", false}, {"newflow", true}} {
		direct, err := udpRate(topo.Client, be+":5353", mode.newFlow, dur)
		if err != nil {
			return err
		}
		hop, err := udpRate(topo.Client, routed.String()+":5353", mode.newFlow, dur)
		if err != nil {
			return err
		}
		through, err := udpRate(topo.Client, uvip+":53", mode.newFlow, dur)
		if err != nil {
			return err
		}
		fmt.Printf("UDP %s: direct %.0f req/s, routed through the node %.0f req/s, through the VIP %.0f req/s (%.2f× direct, %.2f× routed) (load %s)\n",
			mode.name, direct, hop, through, through/direct, through/hop, load())
		benchout.Line("loadbalancer.udp_direct_"+mode.name, 1e6/direct, "us/req")
		benchout.Ratio("loadbalancer.udp_routed_"+mode.name, 1e6/hop, "us/req", direct/hop)
		benchout.Ratio("loadbalancer.udp_vip_"+mode.name, 1e6/through, "us/req", direct/through)
		benchout.Ratio("loadbalancer.udp_vip_vs_routed_"+mode.name, 1e6/through, "us/req", hop/through)
	}

	// The userspace data plane (the unprivileged local mode's): the same
	// backend through lbdataplane.Proxy listening on the node's address,
	// against the same floors. Its connections to the backend are opened
	// inside the node namespace (a setns per connection, which a local
	// mode in the host's own namespace does not pay).
	proxy := &lbdataplane.Proxy{NetNS: topo.Nodes[owner]}
	defer proxy.Close()
	node := topo.NodeIPs[owner]
	beAddr := netip.MustParseAddr(be)
	if err := proxy.Set([]lbdataplane.Service{{Name: "bench/userspace", VIP: node, Ports: []lbdataplane.Port{
		{Protocol: "tcp", Port: 8000, Endpoints: []netip.AddrPort{netip.AddrPortFrom(beAddr, 8080)}},
		{Protocol: "udp", Port: 8053, Endpoints: []netip.AddrPort{netip.AddrPortFrom(beAddr, 5353)}}}}}); err != nil {
		return err
	}
	for _, mode := range []struct{ name, header string }{{"keepalive", ""}, {"newconn", "Connection: close"}} {
		direct, err := wrk(ctx, topo.Client, "http://"+be+":8080/", mode.header, dur)
		if err != nil {
			return err
		}
		through, err := wrk(ctx, topo.Client, "http://"+node.String()+":8000/", mode.header, dur)
		if err != nil {
			return err
		}
		fmt.Printf("wrk %s, userspace proxy: direct %.0f req/s, through the proxy %.0f req/s (%.2f× direct) (load %s)\n",
			mode.name, direct, through, through/direct, load())
		benchout.Ratio("loadbalancer.userspace_"+mode.name, 1e6/through, "us/req", direct/through)
	}
	for _, mode := range []struct {
		name    string
		newFlow bool
	}{{"oneflow", false}, {"newflow", true}} {
		direct, err := udpRate(topo.Client, be+":5353", mode.newFlow, dur)
		if err != nil {
			return err
		}
		through, err := udpRate(topo.Client, node.String()+":8053", mode.newFlow, dur)
		if err != nil {
			return err
		}
		fmt.Printf("UDP %s, userspace proxy: direct %.0f req/s, through the proxy %.0f req/s (%.2f× direct) (load %s)\n",
			mode.name, direct, through, through/direct, load())
		benchout.Ratio("loadbalancer.udp_userspace_"+mode.name, 1e6/through, "us/req", direct/through)
	}
	proxy.Close()

	// Failover.
	var downs []time.Duration
	for k := range kills {
		owner, err := ownerOf(ctx, c, ns, "s000")
		if err != nil {
			return err
		}
		agents[owner].Kill()
		if _, err := netns.Run(ctx, topo.Nodes[owner], "ip", "link", "set", "eth0", "down"); err != nil {
			return err
		}
		start := time.Now()
		for {
			if _, err := lbtest.Get(ctx, topo.Client, vip+":80", 200*time.Millisecond); err == nil {
				break
			}
			if time.Since(start) > time.Minute {
				return fmt.Errorf("kill %d: the VIP did not come back within a minute", k)
			}
		}
		downs = append(downs, time.Since(start))
		// Revive the node: the agent first drops addresses left by the crash,
		// then the cable goes back in.
		if agents[owner], err = topo.StartAgent(spec(owner)); err != nil {
			return err
		}
		time.Sleep(3 * time.Second)
		if _, err := netns.Run(ctx, topo.Nodes[owner], "ip", "link", "set", "eth0", "up"); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
	}
	p50, p99 = pct(downs)
	fmt.Printf("failover over %d kills: p50 %v p99 %v; lease duration %v (load %s)\n", kills, p50, p99, lbagent.DefaultLeaseDuration, load())
	benchout.Ratio("loadbalancer.failover_p50", ms(p50), "ms", float64(p50)/float64(lbagent.DefaultLeaseDuration))
	benchout.Ratio("loadbalancer.failover_p99", ms(p99), "ms", float64(p99)/float64(lbagent.DefaultLeaseDuration))
	return nil
}

func createService(ctx context.Context, c client.Client, ns, name, backend string) error {
	if err := c.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{backend}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}); err != nil {
		return err
	}
	return c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
		Type:  corev1.ServiceTypeLoadBalancer,
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}})
}

// createUDPService is createService with one UDP port, 53 → 5353.
func createUDPService(ctx context.Context, c client.Client, ns, name, backend string) error {
	if err := c.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To(int32(5353)), Protocol: ptr.To(corev1.ProtocolUDP)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{backend}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}); err != nil {
		return err
	}
	return c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
		Type:  corev1.ServiceTypeLoadBalancer,
		Ports: []corev1.ServicePort{{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: corev1.ProtocolUDP}}}})
}

// udpRate sends request/response round trips to addr from namespace ns for
// dur, one at a time, and returns them per second: from one socket, or
// (newFlow) from a new socket each time.
func udpRate(ns, addr string, newFlow bool, dur time.Duration) (float64, error) {
	n := 0
	var elapsed time.Duration
	err := netns.Do(ns, func() error {
		var conn net.Conn
		defer func() {
			if conn != nil {
				_ = conn.Close()
			}
		}()
		buf := make([]byte, 512)
		start := time.Now()
		for time.Since(start) < dur {
			if conn == nil {
				var err error
				if conn, err = net.Dial("udp", addr); err != nil {
					return err
				}
			}
			_ = conn.SetDeadline(time.Now().Add(time.Second))
			if _, err := conn.Write([]byte("q")); err != nil {
				return err
			}
			if _, err := conn.Read(buf); err != nil {
				return fmt.Errorf("UDP round trip %d to %s: %w", n+1, addr, err)
			}
			n++
			if newFlow {
				_ = conn.Close()
				conn = nil
			}
		}
		elapsed = time.Since(start)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

func waitReachable(ctx context.Context, c client.Client, ns, name string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		s := &corev1.Service{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return "", err
		}
		cond := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
		if cond != nil && cond.Status == metav1.ConditionTrue && len(s.Status.LoadBalancer.Ingress) > 0 {
			return s.Status.LoadBalancer.Ingress[0].IP, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("the Service %s/%s was not reachable within %v", ns, name, limit)
}

func ownerOf(ctx context.Context, c client.Client, ns, name string) (int, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		s := &corev1.Service{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return 0, err
		}
		if cond := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition); cond != nil && cond.Status == metav1.ConditionTrue {
			for i := range 2 {
				if strings.Contains(cond.Message, fmt.Sprintf("announced by node node-%d", i)) {
					return i, nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, errors.New("no announcing node named in LoadBalancerReady")
}

var rps = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

func wrk(ctx context.Context, ns, url, header string, dur time.Duration) (float64, error) {
	args := []string{"-t1", "-c8", "-d" + strconv.Itoa(int(dur.Seconds())) + "s"}
	if header != "" {
		args = append(args, "-H", header)
	}
	out, err := netns.Run(ctx, ns, "wrk", append(args, url)...)
	if err != nil {
		return 0, err
	}
	m := rps.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no Requests/sec in wrk output: %s", out)
	}
	if strings.Contains(string(out), "Socket errors") || strings.Contains(string(out), "Non-2xx") {
		fmt.Printf("wrk %s reported errors:\n%s", url, out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func pct(d []time.Duration) (time.Duration, time.Duration) {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0, 0
	}
	return s[len(s)/2], s[(len(s)*99)/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
