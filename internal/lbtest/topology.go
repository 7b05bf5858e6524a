// Package lbtest builds throwaway networks for load-balancer tests and
// benchmarks: network namespaces for "nodes", a client and backends on one
// bridge (itself in a namespace), real HTTP and UDP echo servers, and agent
// processes that can be killed like a dying node. Everything it makes is
// removed by Close; namespaces left by a killed run are swept by the next
// (their names carry the creating process id). Needs root.
package lbtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/converge-dev/converge/internal/netns"
)

// Subnet is the bridge's subnet inside every topology (namespaces isolate
// topologies from each other and from the host).
const Subnet = "10.77.0.0/24"

// PoolRange is a range of Subnet no interface uses, for IPAddressPools.
const PoolRange = "10.77.0.200-10.77.0.250"

var seq atomic.Int32

// Topology is one bridge with nodes, a client and backends.
type Topology struct {
	prefix   string
	Bridge   string
	Client   string
	ClientIP netip.Addr
	Nodes    []string
	NodeIPs  []netip.Addr
	// Backends are namespaces with one address each.
	Backends   []string
	BackendIPs []netip.Addr

	mu      sync.Mutex
	closers []func()
}

// New makes a topology with n nodes and b backends. Call Close (also on
// failure: New closes what it made when it fails).
func New(ctx context.Context, nodes, backends int) (t *Topology, err error) {
	if !netns.IsRoot() {
		return nil, fmt.Errorf("load-balancer network tests need root (network namespaces, nftables); running as uid %d", os.Geteuid())
	}
	Sweep(ctx)
	t = &Topology{prefix: fmt.Sprintf("cvglb%d-%d", os.Getpid(), seq.Add(1))}
	defer func() {
		if err != nil {
			t.Close()
			t = nil
		}
	}()
	t.Bridge = t.prefix + "-br"
	if err := t.addNS(ctx, t.Bridge); err != nil {
		return t, err
	}
	if _, err := netns.Run(ctx, t.Bridge, "ip", "link", "add", "br0", "type", "bridge"); err != nil {
		return t, err
	}
	if _, err := netns.Run(ctx, t.Bridge, "ip", "link", "set", "br0", "up"); err != nil {
		return t, err
	}
	host := 1
	attach := func(name string) (netip.Addr, error) {
		if err := t.addNS(ctx, name); err != nil {
			return netip.Addr{}, err
		}
		ip := netip.AddrFrom4([4]byte{10, 77, 0, byte(host)}) //nolint:gosec // a few hosts per topology, far below 255
		peer := "v" + strconv.Itoa(host)
		host++
		steps := [][]string{
			{t.Bridge, "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", name},
			{t.Bridge, "ip", "link", "set", peer, "master", "br0", "up"},
			{name, "ip", "addr", "add", ip.String() + "/24", "dev", "eth0"},
			{name, "ip", "link", "set", "eth0", "up"},
		}
		for _, s := range steps {
			if _, err := netns.Run(ctx, s[0], s[1], s[2:]...); err != nil {
				return netip.Addr{}, err
			}
		}
		return ip, nil
	}
	t.Client = t.prefix + "-client"
	if t.ClientIP, err = attach(t.Client); err != nil {
		return t, err
	}
	for i := range nodes {
		name := fmt.Sprintf("%s-node%d", t.prefix, i)
		ip, err := attach(name)
		if err != nil {
			return t, err
		}
		// Forwarding for DNAT; no ICMP redirects telling the client to
		// bypass the node (the replies must come back through it).
		for _, kv := range []string{"net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"} {
			if _, err := netns.Run(ctx, name, "sysctl", "-qw", kv); err != nil {
				return t, err
			}
		}
		t.Nodes, t.NodeIPs = append(t.Nodes, name), append(t.NodeIPs, ip)
	}
	host = 20
	for i := range backends {
		name := fmt.Sprintf("%s-be%d", t.prefix, i)
		ip, err := attach(name)
		if err != nil {
			return t, err
		}
		t.Backends, t.BackendIPs = append(t.Backends, name), append(t.BackendIPs, ip)
	}
	return t, nil
}

func (t *Topology) addNS(ctx context.Context, name string) error {
	if _, err := netns.Run(ctx, "", "ip", "netns", "add", name); err != nil {
		return err
	}
	t.onClose(func() { _, _ = netns.Run(context.Background(), "", "ip", "netns", "del", name) }) //nolint:forbidigo // cleanup
	_, err := netns.Run(ctx, name, "ip", "link", "set", "lo", "up")
	return err
}

func (t *Topology) onClose(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closers = append(t.closers, f)
}

// Close stops servers and agents and deletes every namespace (and with
// them every interface, nft table and address inside).
func (t *Topology) Close() {
	t.mu.Lock()
	cs := t.closers
	t.closers = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// Sweep deletes namespaces left by dead processes of earlier runs.
func Sweep(ctx context.Context) {
	entries, _ := os.ReadDir(netns.Dir)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "cvglb")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_, _ = netns.Run(ctx, "", "ip", "netns", "del", e.Name())
	}
}

// Exists reports whether a namespace is still there (for leak checks).
func Exists(name string) bool {
	_, err := os.Stat(filepath.Join(netns.Dir, name))
	return err == nil
}

// Prefix is the common prefix of the topology's namespace names.
func (t *Topology) Prefix() string { return t.prefix }

// ServeHTTP runs an HTTP server in a namespace answering its name.
func (t *Topology) ServeHTTP(ns, addr, name string) error {
	return t.serveHTTP(ns, addr, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })
}

// ServeHTTPPeer runs an HTTP server in a namespace answering the address
// the connection came from (to tell a masqueraded client from a kept one).
func (t *Topology) ServeHTTPPeer(ns, addr string) error {
	return t.serveHTTP(ns, addr, func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, host) //nolint:gosec // a test server's plain-text answer: the peer's own address

	})
}

func (t *Topology) serveHTTP(ns, addr string, h http.HandlerFunc) error {
	var ln net.Listener
	if err := netns.Do(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.onClose(func() { _ = srv.Close() })
	return nil
}

// ServeUDPEcho runs a UDP server in a namespace answering name+payload.
func (t *Topology) ServeUDPEcho(ns, addr, name string) error {
	var pc net.PacketConn
	if err := netns.Do(ns, func() (err error) { pc, err = net.ListenPacket("udp", addr); return err }); err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(name+":"), buf[:n]...), from)
		}
	}()
	t.onClose(func() { _ = pc.Close() })
	return nil
}

// HTTPClient returns a client whose connections start in ns (no
// keep-alive: every request is a new connection through the data plane).
func HTTPClient(ns string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.Do(ns, func() (err error) {
				d := net.Dialer{Timeout: timeout}
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
}

// Get fetches http://addr/ from ns and returns the body.
func Get(ctx context.Context, ns, addr string, timeout time.Duration) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return "", err
	}
	resp, err := HTTPClient(ns, timeout).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// UDP sends payload to addr from ns and returns the reply.
func UDP(ns, addr, payload string, timeout time.Duration) (string, error) {
	var c net.Conn
	if err := netns.Do(ns, func() (err error) { c, err = net.DialTimeout("udp", addr, timeout); return err }); err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(payload)); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// RoutedFloor gives backend be a second address (10.78.0.20+be) reached from
// the client through node (plain IPv4 forwarding, no NAT, symmetric), so a
// benchmark can tell the cost of the extra hop from the cost of the rules.
func (t *Topology) RoutedFloor(ctx context.Context, be, node int) (netip.Addr, error) {
	addr, err := t.BehindNode(ctx, be, node)
	if err != nil {
		return netip.Addr{}, err
	}
	if _, err := netns.Run(ctx, t.Client, "ip", "route", "add", addr.String()+"/32", "via", t.NodeIPs[node].String()); err != nil {
		return netip.Addr{}, err
	}
	return addr, nil
}

// BehindNode gives backend be a second address (10.78.0.20+be) that only
// node routes to, and whose replies go through node, as a Pod sits behind
// its node: what externalTrafficPolicy Local needs to keep the client's
// address. Other nodes have no route to it.
func (t *Topology) BehindNode(ctx context.Context, be, node int) (netip.Addr, error) {
	addr := netip.AddrFrom4([4]byte{10, 78, 0, byte(20 + be)}) //nolint:gosec // a few backends per topology
	nodeIP, beIP := t.NodeIPs[node].String(), t.BackendIPs[be].String()
	table := strconv.Itoa(100 + be)
	for _, c := range [][]string{
		{t.Backends[be], "ip", "addr", "add", addr.String() + "/32", "dev", "eth0"},
		{t.Backends[be], "ip", "rule", "add", "from", addr.String(), "table", table},
		{t.Backends[be], "ip", "route", "add", "default", "via", nodeIP, "table", table},
		{t.Nodes[node], "ip", "route", "add", addr.String() + "/32", "via", beIP},
	} {
		if _, err := netns.Run(ctx, c[0], c[1], c[2:]...); err != nil {
			return netip.Addr{}, err
		}
	}
	return addr, nil
}
