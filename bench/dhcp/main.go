// Command dhcp times the DHCP server of Converge's agent (internal/dhcp's
// dhcp.Server, run inside this benchmark's own process and answering from
// a table of n leases preloaded in memory) against ISC Kea (kea-dhcp4, a
// process of its own allocating from a pool and writing each lease to its
// memfile) on the same veth setup: a bridge in a network namespace with the
// server, and a client namespace on it running a Go load client (Kea's
// perfdhcp is not packaged in Debian 12). The client sends full DORA
// exchanges (DISCOVER, OFFER, REQUEST, ACK) for -n distinct MAC addresses
// with -c in flight and measures leases per second and the p99 of one DORA,
// as the client sees them. No memory is measured. Needs root.
//
// Durability: nothing is durable on Converge's side here. In the product
// the agent answers only for allocations already recorded in IPPool status
// by the IPAM controller (3 API writes per allocation: finalizer, pool
// status, config status, counted in docs/dhcp.md), so a lease is durable in
// the API server before its DISCOVER; this benchmark writes the table
// straight into the server's memory, with no agent process, API server or
// IPAM controller, and neither the allocation nor the DORA writes anything.
// Kea writes each lease to its memfile (persist: true, no fsync,
// lfc-interval 0). The figure compares answering from a preloaded table
// with allocating and recording: not like for like (see bench/README.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"

	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/internal/dhcp"
	"github.com/converge-dev/converge/internal/dhcp/dhcptest"
	"github.com/converge-dev/converge/internal/netns"
)

func main() {
	n := flag.Int("n", 2000, "distinct clients (MAC addresses), one DORA each")
	conc := flag.Int("c", 32, "DORAs in flight")
	skipKea := flag.Bool("skip-kea", false, "measure Converge only")
	flag.Parse()
	if err := run(*n, *conc, *skipKea); err != nil {
		fmt.Fprintln(os.Stderr, "bench/dhcp:", err)
		os.Exit(1)
	}
}

var (
	server = netip.MustParsePrefix("10.66.0.2/16")
	cidr   = netip.MustParsePrefix("10.66.0.0/16")
)

func ipN(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 66, byte(1 + i/250), byte(1 + i%250)}) //nolint:gosec // n < 60000
}

func macN(i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0xbe, 0, byte(i >> 16), byte(i >> 8), byte(i)} //nolint:gosec // byte slices of i
}

func run(n, conc int, skipKea bool) error {
	ctx := context.Background()
	if n > 60000 {
		return errors.New("-n at most 60000")
	}
	conv, err := measure(ctx, "converge", n, conc, func(ctx context.Context, nw *dhcptest.Net) (func(), error) {
		o := &dhcp.Options{Pool: "bench/lan", Server: server.Addr(), Prefix: cidr, Router: netip.MustParseAddr("10.66.0.1"),
			DNS: []netip.Addr{netip.MustParseAddr("10.66.0.1")}, DomainName: "bench.example", LeaseTime: time.Hour}
		leases := map[string]dhcp.Lease{}
		for i := range n {
			leases[macN(i).String()] = dhcp.Lease{IP: ipN(i), Options: o}
		}
		s := &dhcp.Server{Interface: nw.Bridge, Netns: nw.Netns}
		s.SetTable(dhcp.NewTable([]*dhcp.Options{o}, leases))
		if err := s.Start(ctx); err != nil {
			return nil, err
		}
		return func() { _ = s.Close() }, nil
	})
	if err != nil {
		return fmt.Errorf("converge: %w", err)
	}
	print("converge", conv)
	if skipKea {
		return nil
	}
	kea, err := measure(ctx, "kea", n, conc, func(ctx context.Context, nw *dhcptest.Net) (func(), error) {
		return startKea(ctx, nw, n)
	})
	if err != nil {
		return fmt.Errorf("kea: %w", err)
	}
	print("kea", kea)
	benchout.Line("dhcp.kea_p99_dora_ms", kea.p99.Seconds()*1000, "ms")
	benchout.Ratio("dhcp.converge_p99_dora_ms", conv.p99.Seconds()*1000, "ms", conv.p99.Seconds()/kea.p99.Seconds())
	// Lower is better in the table: seconds per 1000 leases.
	benchout.Line("dhcp.kea_seconds_per_1000_leases", 1000/kea.rate, "s")
	benchout.Ratio("dhcp.converge_seconds_per_1000_leases", 1000/conv.rate, "s", kea.rate/conv.rate)
	fmt.Printf("converge/kea leases per second: %.2fx\n", conv.rate/kea.rate)
	return nil
}

func print(name string, r result) {
	fmt.Printf("%s: %d leases in %s: %.0f leases/s, DORA p50 %s p99 %s\n", name, r.n, r.total.Round(time.Millisecond), r.rate,
		r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond))
}

type result struct {
	n        int
	total    time.Duration
	rate     float64
	p50, p99 time.Duration
}

// measure builds a fresh bridge, starts the server with start, and runs the
// load client from a client namespace.
func measure(ctx context.Context, name string, n, conc int, start func(context.Context, *dhcptest.Net) (func(), error)) (result, error) {
	nw, err := dhcptest.New(ctx, "br0", server)
	if err != nil {
		return result{}, err
	}
	defer nw.Close()
	stop, err := start(ctx, nw)
	if err != nil {
		return result{}, err
	}
	defer stop()
	ns, err := nw.AddClient(ctx, "02:be:ff:00:00:01")
	if err != nil {
		return result{}, err
	}
	var conn *net.UDPConn
	if err := netns.Do(ns, func() (err error) {
		conn, err = server4.NewIPv4UDPConn("eth0", &net.UDPAddr{IP: net.IPv4zero, Port: dhcpv4.ClientPort})
		return err
	}); err != nil {
		return result{}, err
	}
	defer conn.Close()
	lc := newLoad(conn)
	go lc.read()
	// Warm up (ARP, server caches) with a few clients outside the range
	// measured: they get no answer from Converge, so only wait briefly.
	time.Sleep(300 * time.Millisecond)
	lat := make([]time.Duration, n)
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range conc {
		wg.Go(func() {
			for i := range next {
				d, err := lc.dora(macN(i), 2*time.Second)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: client %d: %w", name, i, err)
					}
					mu.Unlock()
				}
				lat[i] = d
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	total := time.Since(t0)
	if firstErr != nil {
		return result{}, firstErr
	}
	slices.Sort(lat)
	return result{n: n, total: total, rate: float64(n) / total.Seconds(), p50: lat[n/2], p99: lat[n*99/100]}, nil
}

// load is a DHCP client for many MACs on one socket; replies are matched
// by transaction id.
type load struct {
	conn *net.UDPConn
	mu   sync.Mutex
	wait map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
}

func newLoad(c *net.UDPConn) *load {
	return &load{conn: c, wait: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}}
}

func (l *load) read() {
	buf := make([]byte, 4096)
	for {
		nb, _, err := l.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		m, err := dhcpv4.FromBytes(buf[:nb])
		if err != nil || m.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		l.mu.Lock()
		ch := l.wait[m.TransactionID]
		l.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default:
			}
		}
	}
}

var bcast = &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}

func (l *load) exchange(m *dhcpv4.DHCPv4, want dhcpv4.MessageType, timeout time.Duration) (*dhcpv4.DHCPv4, error) {
	ch := make(chan *dhcpv4.DHCPv4, 4)
	l.mu.Lock()
	l.wait[m.TransactionID] = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.wait, m.TransactionID)
		l.mu.Unlock()
	}()
	if _, err := l.conn.WriteTo(m.ToBytes(), bcast); err != nil {
		return nil, err
	}
	deadline := time.After(timeout)
	for {
		select {
		case r := <-ch:
			if r.MessageType() == want {
				return r, nil
			}
			return nil, fmt.Errorf("got %s, want %s", r.MessageType(), want)
		case <-deadline:
			return nil, fmt.Errorf("no %s within %s", want, timeout)
		}
	}
}

// dora runs one DISCOVER-OFFER-REQUEST-ACK for mac.
func (l *load) dora(mac net.HardwareAddr, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	d, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithBroadcast(true))
	if err != nil {
		return 0, err
	}
	offer, err := l.exchange(d, dhcpv4.MessageTypeOffer, timeout)
	if err != nil {
		return 0, err
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithBroadcast(true))
	if err != nil {
		return 0, err
	}
	if _, err := l.exchange(req, dhcpv4.MessageTypeAck, timeout); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// startKea runs kea-dhcp4 on the bridge with a memfile lease database and
// a pool of n addresses.
func startKea(ctx context.Context, nw *dhcptest.Net, n int) (func(), error) {
	bin, err := exec.LookPath("kea-dhcp4")
	if err != nil {
		return nil, fmt.Errorf("kea-dhcp4 is not installed (apt-get install kea-dhcp4-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "bench-kea-")
	if err != nil {
		return nil, err
	}
	conf := map[string]any{"Dhcp4": map[string]any{
		"interfaces-config": map[string]any{"interfaces": []string{nw.Bridge}},
		"lease-database":    map[string]any{"type": "memfile", "persist": true, "name": filepath.Join(dir, "leases.csv"), "lfc-interval": 0},
		"valid-lifetime":    3600,
		"subnet4": []any{map[string]any{
			"id": 1, "subnet": cidr.String(),
			"pools":       []any{map[string]any{"pool": ipN(0).String() + " - " + ipN(n-1).String()}},
			"option-data": []any{map[string]any{"name": "routers", "data": "10.66.0.1"}, map[string]any{"name": "domain-name-servers", "data": "10.66.0.1"}},
		}},
		"loggers": []any{map[string]any{"name": "kea-dhcp4", "severity": "WARN", "output_options": []any{map[string]any{"output": filepath.Join(dir, "kea.log")}}}},
	}}
	b, _ := json.Marshal(conf)
	cf := filepath.Join(dir, "kea.json")
	if err := os.WriteFile(cf, b, 0o600); err != nil {
		return nil, err
	}
	cmd := netns.Command(ctx, nw.Netns, bin, "-c", cf)
	cmd.Env = append(os.Environ(), "KEA_PIDFILE_DIR="+dir, "KEA_LOCKFILE_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := os.Create(filepath.Join(dir, "kea.out"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	time.Sleep(1500 * time.Millisecond) // kea opens its sockets
	return func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
		_ = out.Close()
		_ = os.RemoveAll(dir)
	}, nil
}
