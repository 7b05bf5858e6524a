package lbdataplane_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/lbdataplane"
)

// loopbackServers starts a TCP server answering name and a UDP server
// answering name+":"+payload on 127.0.0.1, returning their addresses.
func loopbackServers(t *testing.T, name string) (tcp, udp netip.AddrPort) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, name)
			_ = c.Close()
		}
	}()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		b := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(name+":"), b[:n]...), from)
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String()), netip.MustParseAddrPort(pc.LocalAddr().String())
}

func tcpGet(t *testing.T, addr string) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// freeLoopbackPort returns a port free on vip for both TCP and UDP.
func freeLoopbackPort(t *testing.T, vip string) uint16 {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", vip+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		pc, err := net.ListenPacket("udp", net.JoinHostPort(vip, strconv.Itoa(port)))
		if err == nil {
			_ = pc.Close()
			return uint16(port)
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestProxyFollowsEndpoints drives the userspace data plane with real
// sockets on loopback addresses (no privilege needed): TCP and UDP reach
// the endpoints, new connections follow an endpoint change, a UDP flow to
// a removed endpoint moves to a current one (as the kernel path's conntrack
// sweep makes it), an endpoint that refuses makes the probe fail, and a
// port no longer wanted stops listening.
func TestProxyFollowsEndpoints(t *testing.T) {
	aTCP, aUDP := loopbackServers(t, "a")
	bTCP, bUDP := loopbackServers(t, "b")
	vip := "127.242.0.1"
	port := freeLoopbackPort(t, vip)
	target := net.JoinHostPort(vip, strconv.Itoa(int(port)))
	p := &lbdataplane.Proxy{}
	t.Cleanup(p.Close)
	svc := func(tcp, udp []netip.AddrPort) []lbdataplane.Service {
		return []lbdataplane.Service{{Name: "ns/web", VIP: netip.MustParseAddr(vip), Ports: []lbdataplane.Port{
			{Protocol: "tcp", Port: port, Endpoints: tcp}, {Protocol: "udp", Port: port, Endpoints: udp}}}}
	}
	if err := p.Set(svc([]netip.AddrPort{aTCP, bTCP}, []netip.AddrPort{aUDP})); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 50 {
		body, err := tcpGet(t, target)
		if err != nil {
			t.Fatal(err)
		}
		seen[body] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("TCP reached %v, want both endpoints", seen)
	}
	if err := lbdataplane.ProbeTCP(t.Context(), "", target, time.Second, 200*time.Millisecond); err != nil {
		t.Fatalf("probe through a reachable endpoint: %v", err)
	}

	// One UDP socket, as a resolver keeps: pinned to a, then moved to b
	// once a is no longer an endpoint.
	uc, err := net.Dial("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	ask := func() string {
		_ = uc.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := uc.Write([]byte("hi")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		n, err := uc.Read(b)
		if err != nil {
			t.Fatalf("UDP through the proxy: %v", err)
		}
		return string(b[:n])
	}
	if got := ask(); got != "a:hi" {
		t.Fatalf("UDP reply %q, want a:hi", got)
	}
	if err := p.Set(svc([]netip.AddrPort{bTCP}, []netip.AddrPort{bUDP})); err != nil {
		t.Fatal(err)
	}
	if got := ask(); got != "b:hi" {
		t.Fatalf("UDP reply after a was removed: %q, want b:hi (the flow kept its removed endpoint)", got)
	}
	for range 10 {
		if body, err := tcpGet(t, target); err != nil || body != "b" {
			t.Fatalf("TCP after the change: %q, %v; want b", body, err)
		}
	}

	// An endpoint nobody listens on: the probe says unreachable.
	dead := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freeLoopbackPort(t, "127.0.0.1"))
	if err := p.Set(svc([]netip.AddrPort{dead}, []netip.AddrPort{bUDP})); err != nil {
		t.Fatal(err)
	}
	if err := lbdataplane.ProbeTCP(t.Context(), "", target, time.Second, time.Second); err == nil {
		t.Fatal("probe succeeded with an endpoint that refuses every connection")
	}

	// No endpoints: the listener goes.
	if err := p.Set(nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if c, err := (&net.Dialer{}).DialContext(ctx, "tcp", target); err == nil {
		_ = c.Close()
		t.Fatal("still listening after Set(nil)")
	}
}

// TestProxyBoundsUDPFlows: a client sending from ever new ports gets every
// answer, while the proxy keeps at most MaxUDPFlows flows (sockets) open;
// without the bound each new port held a socket for the idle timeout, and
// a fast client ran the process out of file descriptors.
func TestProxyBoundsUDPFlows(t *testing.T) {
	_, aUDP := loopbackServers(t, "a")
	vip := "127.242.0.2"
	port := freeLoopbackPort(t, vip)
	target := net.JoinHostPort(vip, strconv.Itoa(int(port)))
	const bound = 16
	p := &lbdataplane.Proxy{MaxUDPFlows: bound}
	t.Cleanup(p.Close)
	if err := p.Set([]lbdataplane.Service{{Name: "ns/dns", VIP: netip.MustParseAddr(vip), Ports: []lbdataplane.Port{
		{Protocol: "udp", Port: port, Endpoints: []netip.AddrPort{aUDP}}}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 * bound {
		c, err := net.Dial("udp", target)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		n, err := c.Read(b)
		_ = c.Close()
		if err != nil || string(b[:n]) != "a:q" {
			t.Fatalf("flow %d: reply %q, %v", i, b[:n], err)
		}
		if got := p.UDPFlows(netip.MustParseAddr(vip), port); got > bound {
			t.Fatalf("after %d flows the proxy holds %d, want at most %d", i+1, got, bound)
		}
	}
}
