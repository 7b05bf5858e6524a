package lbdataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/converge-dev/converge/internal/netns"
)

// Proxy is the userspace data plane, for an unprivileged local mode: a
// listener on each VIP:port with endpoints, copying bytes to an endpoint
// chosen per connection (TCP) or per client address and port (UDP). It
// needs no privilege for ports from 1024 up, on addresses the host already
// has (all of 127.0.0.0/8 is local on Linux). Endpoints see the proxy as the
// client. It is slower than the kernel path (bench/loadbalancer prints
// both); the agent uses it only when asked (converge up, not root).
type Proxy struct {
	// NetNS is the network namespace to listen and connect in; "" is the
	// process's own.
	NetNS string
	// UDPIdle is how long a UDP client's flow lives without traffic
	// (default 30s, conntrack's UDP timeout).
	UDPIdle time.Duration
	// MaxUDPFlows bounds the UDP flows of one VIP:port (default
	// DefaultMaxUDPFlows). Each flow holds a socket and a goroutine: a
	// client sending from ever new ports (or a flood of them) would
	// otherwise run the process out of file descriptors within one idle
	// timeout. At the bound, a new flow closes the least recently active
	// eighth of them (their clients' next datagram opens a new flow), as
	// a full conntrack table makes room by early drop.
	MaxUDPFlows int

	mu        sync.Mutex
	listeners map[proxyKey]*proxyListener
}

type proxyKey struct {
	vip   netip.Addr
	proto string
	port  uint16
}

// proxyListener serves one VIP:port.
type proxyListener struct {
	key      proxyKey
	affinity atomic.Bool
	eps      atomic.Pointer[[]netip.AddrPort]
	ln       net.Listener   // tcp
	pc       net.PacketConn // udp
	udpIdle  time.Duration
	maxFlows int
	netns    string

	mu    sync.Mutex
	conns map[net.Conn]struct{} // tcp: both sides of open connections
	flows map[string]*udpFlow   // udp: by client address
	done  chan struct{}
}

// udpFlow is one UDP client's socket to its endpoint.
type udpFlow struct {
	conn *net.UDPConn
	ep   netip.AddrPort
	last atomic.Int64 // unix nanoseconds of the last packet
}

// Set makes the proxy serve exactly the ports of svcs that have endpoints:
// new listeners are opened, endpoint changes apply to the next connection
// (and UDP flows to a removed endpoint are closed, as the kernel path's
// conntrack sweep does), and listeners no longer wanted are closed with
// their connections. A port that cannot be bound is reported in the error
// and the others still served.
func (p *Proxy) Set(svcs []Service) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listeners == nil {
		p.listeners = map[proxyKey]*proxyListener{}
	}
	want := map[proxyKey]bool{}
	var errs []error
	for _, s := range svcs {
		for _, port := range s.Ports {
			if len(port.Endpoints) == 0 {
				continue
			}
			k := proxyKey{s.VIP, port.Protocol, port.Port}
			want[k] = true
			eps := slices.Clone(port.Endpoints)
			slices.SortFunc(eps, func(a, b netip.AddrPort) int { return a.Compare(b) })
			l := p.listeners[k]
			if l == nil {
				var err error
				if l, err = p.listen(k); err != nil {
					errs = append(errs, err)
					continue
				}
				p.listeners[k] = l
			}
			l.affinity.Store(s.ClientIPAffinity)
			l.eps.Store(&eps)
			l.dropStaleFlows(eps)
		}
	}
	for k, l := range p.listeners {
		if !want[k] {
			l.close()
			delete(p.listeners, k)
		}
	}
	return errors.Join(errs...)
}

// Close closes every listener and connection.
func (p *Proxy) Close() {
	_ = p.Set(nil)
}

func (p *Proxy) listen(k proxyKey) (*proxyListener, error) {
	addr := net.JoinHostPort(k.vip.String(), strconv.Itoa(int(k.port)))
	l := &proxyListener{key: k, conns: map[net.Conn]struct{}{}, flows: map[string]*udpFlow{},
		done: make(chan struct{}), udpIdle: p.UDPIdle, maxFlows: p.MaxUDPFlows, netns: p.NetNS}
	if l.udpIdle == 0 {
		l.udpIdle = 30 * time.Second
	}
	if l.maxFlows <= 0 {
		l.maxFlows = DefaultMaxUDPFlows
	}
	err := netns.Do(l.netns, func() (err error) {
		if k.proto == "udp" {
			l.pc, err = net.ListenPacket("udp", addr)
		} else {
			l.ln, err = net.Listen("tcp", addr)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("userspace proxy: listening on %s %s: %w", k.proto, addr, err)
	}
	if k.proto == "udp" {
		go l.serveUDP()
		return l, nil
	}
	go l.serveTCP()
	return l, nil
}

// pick chooses an endpoint for a client: by a hash of its address with
// ClientIP affinity, else at random.
func (l *proxyListener) pick(client netip.Addr, eps []netip.AddrPort) netip.AddrPort {
	if l.affinity.Load() {
		h := fnv.New32a()
		_, _ = h.Write(client.AsSlice())
		return eps[h.Sum32()%uint32(len(eps))] //nolint:gosec // len(eps) > 0 and small
	}
	return eps[rand.IntN(len(eps))] //nolint:gosec // load spreading, not security
}

func (l *proxyListener) serveTCP() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.forwardTCP(c)
	}
}

// forwardTCP connects the client to an endpoint (trying the others when
// the first refuses) and copies both ways; with no endpoint reachable the
// client's connection is closed at once (the agent's probe reads that as
// unreachable).
func (l *proxyListener) forwardTCP(c net.Conn) {
	eps := *l.eps.Load()
	client := netip.Addr{}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		client = ap.Addr().Unmap()
	}
	first := l.pick(client, eps)
	order := append([]netip.AddrPort{first}, slices.DeleteFunc(slices.Clone(eps), func(e netip.AddrPort) bool { return e == first })...)
	var be net.Conn
	for _, ep := range order {
		err := netns.Do(l.netns, func() (err error) {
			be, err = (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", ep.String())
			return err
		})
		if err == nil {
			break
		}
	}
	if be == nil {
		_ = c.Close()
		return
	}
	if !l.track(c, be) {
		return
	}
	defer l.untrack(c, be)
	var wg sync.WaitGroup
	wg.Go(func() { halfCopy(be, c) })
	halfCopy(c, be)
	wg.Wait()
}

// halfCopy copies src to dst and then closes dst's write side, so each
// direction ends on its own (HTTP/1.0 style close, half-closed clients).
func halfCopy(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func (l *proxyListener) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	default:
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *proxyListener) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(l.conns, c)
	}
}

func (l *proxyListener) serveUDP() {
	buf := make([]byte, 64*1024)
	tick := time.NewTicker(l.udpIdle / 3)
	defer tick.Stop()
	for {
		_ = l.pc.SetReadDeadline(time.Now().Add(l.udpIdle / 3))
		n, from, err := l.pc.ReadFrom(buf)
		select {
		case <-tick.C:
			l.expireFlows()
		default:
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		f := l.flow(from)
		if f == nil {
			continue
		}
		f.last.Store(time.Now().UnixNano())
		_, _ = f.conn.Write(buf[:n])
	}
}

// flow returns the client's flow, opening one to a chosen endpoint.
func (l *proxyListener) flow(from net.Addr) *udpFlow {
	key := from.String()
	l.mu.Lock()
	f := l.flows[key]
	l.mu.Unlock()
	if f != nil {
		return f
	}
	ap, err := netip.ParseAddrPort(key)
	if err != nil {
		return nil
	}
	ep := l.pick(ap.Addr().Unmap(), *l.eps.Load())
	var conn *net.UDPConn
	err = netns.Do(l.netns, func() (err error) {
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ep))
		return err
	})
	if err != nil {
		return nil
	}
	f = &udpFlow{conn: conn, ep: ep}
	l.mu.Lock()
	select {
	case <-l.done:
		l.mu.Unlock()
		_ = conn.Close()
		return nil
	default:
	}
	if len(l.flows) >= l.maxFlows {
		l.evictOldestLocked()
	}
	l.flows[key] = f
	l.mu.Unlock()
	go func() {
		b := make([]byte, 64*1024)
		for {
			n, err := conn.Read(b)
			if err != nil {
				return
			}
			f.last.Store(time.Now().UnixNano())
			_, _ = l.pc.WriteTo(b[:n], from)
		}
	}()
	return f
}

// dropStaleFlows closes the UDP flows whose endpoint is gone: the client's
// next packet opens a flow to a current endpoint.
func (l *proxyListener) dropStaleFlows(eps []netip.AddrPort) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, f := range l.flows {
		if !slices.Contains(eps, f.ep) {
			_ = f.conn.Close()
			delete(l.flows, k)
		}
	}
}

// DefaultMaxUDPFlows is Proxy.MaxUDPFlows's default.
const DefaultMaxUDPFlows = 4096

// evictOldestLocked closes the least recently active eighth of the flows
// (at least one); l.mu is held.
func (l *proxyListener) evictOldestLocked() {
	type aged struct {
		key  string
		last int64
	}
	all := make([]aged, 0, len(l.flows))
	for k, f := range l.flows {
		all = append(all, aged{k, f.last.Load()})
	}
	slices.SortFunc(all, func(a, b aged) int { return cmp.Compare(a.last, b.last) })
	for _, a := range all[:max(1, len(all)/8)] {
		_ = l.flows[a.key].conn.Close()
		delete(l.flows, a.key)
	}
}

// UDPFlows is the number of open UDP flows on vip:port (for tests).
func (p *Proxy) UDPFlows(vip netip.Addr, port uint16) int {
	p.mu.Lock()
	l := p.listeners[proxyKey{vip: vip, proto: "udp", port: port}]
	p.mu.Unlock()
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.flows)
}

func (l *proxyListener) expireFlows() {
	cutoff := time.Now().Add(-l.udpIdle).UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, f := range l.flows {
		if f.last.Load() < cutoff {
			_ = f.conn.Close()
			delete(l.flows, k)
		}
	}
}

func (l *proxyListener) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.done)
	if l.ln != nil {
		_ = l.ln.Close()
	}
	if l.pc != nil {
		_ = l.pc.Close()
	}
	for c := range l.conns {
		_ = c.Close()
	}
	for k, f := range l.flows {
		_ = f.conn.Close()
		delete(l.flows, k)
	}
}

// ProbeTCP reports whether a connection to target through a userspace
// listener reached an endpoint: the proxy closes a client's connection at
// once when no endpoint accepts, so an end of stream within wait means
// unreachable, while silence (the endpoint waits for a request) or data
// means reached.
func ProbeTCP(ctx context.Context, ns, target string, timeout, wait time.Duration) error {
	var c net.Conn
	err := netns.Do(ns, func() (err error) {
		c, err = (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", target)
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		return nil
	}
	return fmt.Errorf("the proxy closed the connection: no endpoint accepted it (%w)", err)
}
