// Package bmc runs the virtual BMCs of every MachineBMC in one process: a
// manager Runnable that only the leader runs, holding for each BMC one UDP
// socket (IPMI, internal/bmc/ipmi) and one HTTPS listener (Redfish,
// internal/bmc/redfish) on Host with ports of their own.
//
// One listener per BMC (rather than one per IP) because an IPMI client
// names a BMC only by address and port: RMCP+ carries no host name, and
// Redfish clients expect one system per service. So in local mode each BMC
// gets its own ports on 127.0.0.1, and 1000 BMCs cost 2000 sockets in one
// process, not 1000 Pods.
//
// A BMC keeps no state of its own: every accepted command is a patch of
// the Machine's spec (powerState, bootDevice/bootOnce, image) under the
// field manager converge-bmc, plus an Event on the Machine naming the
// protocol, the command, the caller's address and user; what it reports
// (power state) comes from the Machine's status in the manager's cache.
package bmc

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/bmc/ipmi"
	"github.com/converge-dev/converge/internal/bmc/redfish"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/webhookcert"
)

// FieldManager is the field manager of the BMCs' writes to Machines.
const FieldManager = "converge-bmc"

// ErrNotStarted is returned by Ensure before the server runs (on a standby
// replica, or before the leader's runnables started).
var ErrNotStarted = errors.New("bmc: the BMC server is not running (not the leader yet)")

// Config is what one BMC serves.
type Config struct {
	// Machine is the Machine the BMC controls.
	Machine types.NamespacedName
	// User and Password are the credentials.
	User, Password string
	// IPMI and Redfish select the protocols.
	IPMI, Redfish bool
	// IPMIPort and RedfishPort are preferred ports (the ones published
	// before a restart); taken when free, else any free port is used.
	IPMIPort, RedfishPort int
}

// Endpoints are where a BMC answers.
type Endpoints struct {
	// IPMI is host:port ("" when not served).
	IPMI string
	// Redfish is the https base URL ("" when not served).
	Redfish string
}

// Server serves every BMC. Client (reads from the cache, patches
// Machines) and Recorder must be set.
type Server struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Host is the address listeners bind; 127.0.0.1 when empty.
	Host string
	// Advertise is the address the endpoints name and the Redfish
	// certificate carries (a Pod's IP when Host is 0.0.0.0); Host when
	// empty.
	Advertise string
	// NetNS, when set, is the network namespace (a name under
	// /var/run/netns) the listeners are opened in, and Dial's: the BMCs
	// live on that network, not the manager's (`converge up
	// --machine-netns`, tests).
	NetNS string
	// CASecret is the Secret (in the manager's namespace) keeping the CA
	// that issues the Redfish serving certificates, created at the first
	// start (LoadOrCreateCA): every leader issues from the same CA, so the
	// bundle clients trust survives restarts and failovers. Empty Name: a
	// CA made in memory at each start (tests of this package only).
	CASecret types.NamespacedName
	// APIReader reads the CA Secret uncached (the cache may not watch the
	// manager's namespace); Client when nil.
	APIReader client.Reader
	Log       logr.Logger

	mu      sync.Mutex
	ctx     context.Context
	ca      *webhookcert.Bundle
	bmcs    map[types.NamespacedName]*instance
	running bool
	wg      sync.WaitGroup
}

type creds struct{ user, password string }

type instance struct {
	cfg     Config
	creds   atomic.Pointer[creds]
	backend *machineBackend
	udp     net.PacketConn
	ipmi    *ipmi.Server
	https   *http.Server
	ln      net.Listener
	// cert is the BMC's Redfish serving certificate: issued from the CA
	// for the server's own names, and again when the controller publishes
	// a host it does not name (a Service's address; CoverNames).
	cert   atomic.Pointer[serving]
	cancel context.CancelFunc
	ep     Endpoints
}

// NeedLeaderElection makes the server run on the leader only: a standby
// replica does not answer for BMCs it does not own.
func (s *Server) NeedLeaderElection() bool { return true }

// Start loads the CA (retrying until it can: the API server may be
// unreachable for a while), then runs until ctx ends and closes every BMC.
func (s *Server) Start(ctx context.Context) error {
	ca, err := s.loadCA(ctx)
	if err != nil {
		return err
	}
	if ca == nil {
		return nil // stopped before the CA could be read
	}
	s.mu.Lock()
	s.ctx, s.ca, s.running = ctx, ca, true
	if s.bmcs == nil {
		s.bmcs = map[types.NamespacedName]*instance{}
	}
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.running = false
	for k, in := range s.bmcs {
		in.stop()
		delete(s.bmcs, k)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// loadCA reads or creates the CA Secret, retrying every 2 s while that
// fails; nil, nil when ctx ends first.
func (s *Server) loadCA(ctx context.Context) (*webhookcert.Bundle, error) {
	if s.CASecret.Name == "" {
		return NewCA()
	}
	r := s.APIReader
	if r == nil {
		r = s.Client
	}
	for {
		ca, created, err := LoadOrCreateCA(ctx, r, s.Client, s.CASecret)
		if err == nil {
			s.Log.Info("Using the BMC CA", "Secret", s.CASecret.String(), "created", created)
			return ca, nil
		}
		s.Log.Error(err, "Loading the BMC CA; retrying")
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(2 * time.Second):
		}
	}
}

func (s *Server) host() string {
	if s.Host == "" {
		return "127.0.0.1"
	}
	return s.Host
}

// AdvertisedAddress is the address the endpoints name and the Redfish
// certificate carries.
func (s *Server) AdvertisedAddress() string { return s.advertise() }

func (s *Server) advertise() string {
	if s.Advertise != "" {
		return s.Advertise
	}
	return s.host()
}

// Dial connects as a client of the BMCs would from where they listen
// (inside NetNS when set): the controller's probe uses it.
func (s *Server) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(s.NetNS, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// RootCAs is a pool holding the CA that issued the Redfish certificates
// (the controller's probe verifies with it); nil before Start.
func (s *Server) RootCAs() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ca == nil {
		return nil
	}
	return s.ca.CAPool()
}

// CABundle is the CA certificate (PEM) clients of the Redfish endpoints
// trust; nil before Start.
func (s *Server) CABundle() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ca == nil {
		return nil
	}
	return s.ca.CACert
}

// CoverNames makes the Redfish certificate of the BMC key name hosts too
// (the address its endpoint is published at), issuing it again from the CA
// when it does not, or when it is due for renewal. The next TLS handshake
// gets the new certificate; open connections keep theirs.
func (s *Server) CoverNames(key types.NamespacedName, hosts ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.bmcs[key]
	if in == nil || in.https == nil {
		return nil
	}
	hosts = slices.DeleteFunc(slices.Clone(hosts), func(h string) bool { return h == "" })
	if cur := in.cert.Load(); cur != nil && cur.bundle.Check(hosts, time.Now(), renewBefore) == nil {
		return nil
	}
	names := s.ownNames()
	for _, h := range hosts {
		if !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	cert, err := s.issue(names)
	if err != nil {
		return fmt.Errorf("issuing the Redfish certificate of MachineBMC %s: %w", key, err)
	}
	in.cert.Store(cert)
	return nil
}

// serving is a Redfish serving certificate: the bundle it was issued as
// (checked against the names it must cover) and the key pair served.
type serving struct {
	bundle *webhookcert.Bundle
	pair   *tls.Certificate
}

// issue makes a Redfish serving certificate for names from the CA.
func (s *Server) issue(names []string) (*serving, error) {
	b, err := s.ca.IssueServing(names, time.Now())
	if err != nil {
		return nil, err
	}
	pair, err := b.KeyPair()
	if err != nil {
		return nil, err
	}
	return &serving{bundle: b, pair: pair}, nil
}

// ownNames are the names every Redfish certificate carries: 127.0.0.1,
// ::1, localhost and the advertised address.
func (s *Server) ownNames() []string {
	names := []string{"127.0.0.1", "::1", "localhost"}
	if ip := net.ParseIP(s.advertise()); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		names = append(names, ip.String())
	}
	return names
}

// Len is the number of BMCs served.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bmcs)
}

// Ensure serves the BMC key with cfg, starting it or updating its
// credentials in place (the next session uses them; Redfish sessions
// opened with the old ones end).
func (s *Server) Ensure(key types.NamespacedName, cfg Config) (Endpoints, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return Endpoints{}, ErrNotStarted
	}
	if in := s.bmcs[key]; in != nil {
		if in.cfg.Machine == cfg.Machine && in.cfg.IPMI == cfg.IPMI && in.cfg.Redfish == cfg.Redfish {
			in.creds.Store(&creds{cfg.User, cfg.Password})
			return in.ep, nil
		}
		in.stop()
		delete(s.bmcs, key)
	}
	in, err := s.start(key, cfg)
	if err != nil {
		return Endpoints{}, err
	}
	s.bmcs[key] = in
	return in.ep, nil
}

// Remove stops the BMC key, if served.
func (s *Server) Remove(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.bmcs[key]; in != nil {
		in.stop()
		delete(s.bmcs, key)
	}
}

func (s *Server) start(key types.NamespacedName, cfg Config) (*instance, error) {
	ctx, cancel := context.WithCancel(s.ctx)
	in := &instance{cfg: cfg, cancel: cancel}
	in.creds.Store(&creds{cfg.User, cfg.Password})
	in.backend = &machineBackend{srv: s, key: cfg.Machine, creds: &in.creds, bmc: key, ctx: ctx}
	host, adv := s.host(), s.advertise()
	if cfg.IPMI {
		var conn net.PacketConn
		err := netns.Do(s.NetNS, func() (err error) { conn, err = listenUDP(host, cfg.IPMIPort); return err })
		if err != nil {
			cancel()
			return nil, fmt.Errorf("listening for IPMI: %w", err)
		}
		in.udp = conn
		sum := sha256.Sum256([]byte(key.String()))
		in.ipmi = &ipmi.Server{Backend: ipmiBackend{in.backend}, Log: s.Log.WithValues("MachineBMC", key.String())}
		copy(in.ipmi.GUID[:], sum[:16])
		in.ep.IPMI = net.JoinHostPort(adv, strconv.Itoa(conn.LocalAddr().(*net.UDPAddr).Port))
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := in.ipmi.Serve(ctx, conn); err != nil {
				s.Log.Error(err, "IPMI listener stopped", "MachineBMC", key.String())
			}
		}()
	}
	if cfg.Redfish {
		var ln net.Listener
		err := netns.Do(s.NetNS, func() (err error) { ln, err = listenTCP(host, cfg.RedfishPort); return err })
		if err != nil {
			in.stop()
			return nil, fmt.Errorf("listening for Redfish: %w", err)
		}
		in.ln = ln
		cert, err := s.issue(s.ownNames())
		if err != nil {
			in.stop()
			return nil, fmt.Errorf("issuing the Redfish certificate: %w", err)
		}
		in.cert.Store(cert)
		in.https = &http.Server{
			Handler:           &redfish.Service{Backend: redfishBackend{in.backend}},
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12,
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return in.cert.Load().pair, nil }},
			// Handshakes a load balancer's TCP health check cuts short
			// are not errors worth a line each.
			ErrorLog: log.New(logWriter{s.Log.V(1).WithValues("MachineBMC", key.String())}, "", 0),
		}
		in.ep.Redfish = "https://" + net.JoinHostPort(adv, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
		tln := tls.NewListener(ln, in.https.TLSConfig)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := in.https.Serve(tln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.Log.Error(err, "Redfish listener stopped", "MachineBMC", key.String())
			}
		}()
	}
	return in, nil
}

// logWriter writes the HTTP server's log lines to a logr logger.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (in *instance) stop() {
	in.cancel()
	if in.udp != nil {
		_ = in.udp.Close()
	}
	if in.https != nil {
		_ = in.https.Close()
	} else if in.ln != nil {
		_ = in.ln.Close()
	}
}

func listenUDP(host string, port int) (net.PacketConn, error) {
	if port > 0 {
		if c, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port))); err == nil {
			return c, nil
		}
	}
	return net.ListenPacket("udp", net.JoinHostPort(host, "0"))
}

func listenTCP(host string, port int) (net.Listener, error) {
	if port > 0 {
		if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))); err == nil {
			return l, nil
		}
	}
	return net.Listen("tcp", net.JoinHostPort(host, "0"))
}
