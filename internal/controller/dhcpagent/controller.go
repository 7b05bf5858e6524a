// Package dhcpagent runs Converge's DHCP agent (internal/dhcp) in the
// manager, for local mode: one server per machine network, bound to the
// network's bridge inside the network namespace Converge made for machine
// NICs (--machine-netns, where QemuMachine puts its bridges and taps). It
// serves from the allocations recorded in IPPool status, read through the
// manager's cache; when the API server is unreachable the cache and the
// servers keep what they last saw, so existing clients keep renewing.
//
// For pools with spec.ipv4Config.networkBoot it also runs the network boot
// HTTP server (dhcp.BootServer) on the pool's server address, in the same
// namespace, answering iPXE with a script that boots the image its Machine
// names in spec.image now (looked up in the manager's cache).
//
// In the manager it is a controller, so it runs on the leader only: one
// agent answers per network. In a cluster (cluster mode) the same
// Reconciler runs in a process of its own, `converge agent dhcp` (RunAgent),
// one Deployment per network with an attachment to that network; a Lease
// per network makes one agent answer (see docs/dhcp.md).
package dhcpagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/dhcp"
	"github.com/converge-dev/converge/internal/ippool"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/qemu"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "dhcp-agent"

// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=ippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=ippools/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// NetworkBootReason is the reason of the Event a Machine gets when it is
// served a boot script.
const NetworkBootReason = "NetworkBoot"

// Reconciler runs the DHCP servers.
type Reconciler struct {
	Client client.Client
	// Netns is the machine network namespace; empty: no agent (AgentReady
	// False, AgentUnavailable), unless Interface is set.
	Netns string
	// Interface, when set (cluster mode), is the interface every network is
	// served on, in Netns (empty: the process's own namespace), instead of
	// the network's bridge; the agent creates nothing but the pools' server
	// addresses on it.
	Interface string
	// Identity names this manager in status.agent.
	Identity string
	// ImageDir is the image store network boot serves kernels and initrds
	// from (QemuMachine's).
	ImageDir string
	// NetBootPort is the network boot HTTP server's port on the server
	// address of each pool with networkBoot; 0 is dhcp.DefaultNetBootPort.
	NetBootPort int
	// Recorder records the NetworkBoot Events; nil records none.
	Recorder events.EventRecorder

	mu      sync.Mutex
	ctx     context.Context //nolint:containedctx // the manager's, for servers outliving a reconcile
	servers map[string]*dhcp.Server
	boot    map[string]*dhcp.BootServer
}

// SetupWithManager registers the controller and the runnable stopping the
// servers with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}
	r.defaults()
	ready := make(chan struct{})
	if err := mgr.Add(runnable(func(ctx context.Context) error {
		r.mu.Lock()
		r.ctx = ctx
		r.mu.Unlock()
		close(ready)
		<-ctx.Done()
		r.StopAll()
		return nil
	})); err != nil {
		return err
	}
	// Every pool of a network shares its server: a change to one queues all.
	sameNetwork := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		p, ok := o.(*dhcpv1alpha1.IPPool)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p.Spec.NetworkName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).Named(ControllerName).
		Watches(&dhcpv1alpha1.IPPool{}, sameNetwork).
		Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
			<-ready
			return r.reconcileNetwork(ctx, req.Name)
		}))
}

func (r *Reconciler) defaults() {
	if r.Identity == "" {
		r.Identity, _ = os.Hostname()
	}
	if r.NetBootPort == 0 {
		r.NetBootPort = dhcp.DefaultNetBootPort
	}
	r.servers = map[string]*dhcp.Server{}
	r.boot = map[string]*dhcp.BootServer{}
}

// Begin prepares a Reconciler run outside a manager (RunAgent): its
// servers live until ctx ends or StopAll. Client must be set.
func (r *Reconciler) Begin(ctx context.Context) {
	r.defaults()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx = ctx
}

// SyncNetwork serves network from its pools as they are now (and stops
// serving it when it has none) and reports AgentReady on each pool: what
// one reconcile of the controller does.
func (r *Reconciler) SyncNetwork(ctx context.Context, network string) error {
	_, err := r.reconcileNetwork(ctx, network)
	return err
}

// StopAll stops every server.
func (r *Reconciler) StopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.servers {
		_ = s.Close()
		delete(r.servers, k)
	}
	for k, b := range r.boot {
		_ = b.Close()
		delete(r.boot, k)
	}
}

type runnable func(context.Context) error

func (f runnable) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection: only the leader serves.
func (runnable) NeedLeaderElection() bool { return true }

// reconcileNetwork builds the network's table from every pool serving it
// and makes sure a server answers on the bridge.
func (r *Reconciler) reconcileNetwork(ctx context.Context, network string) (ctrl.Result, error) {
	var list dhcpv1alpha1.IPPoolList
	if err := r.Client.List(ctx, &list); err != nil {
		return ctrl.Result{}, err
	}
	var pools []*dhcpv1alpha1.IPPool
	for i := range list.Items {
		if list.Items[i].Spec.NetworkName == network && list.Items[i].DeletionTimestamp.IsZero() {
			pools = append(pools, &list.Items[i])
		}
	}
	if len(pools) == 0 {
		r.stop(network)
		return ctrl.Result{}, nil
	}
	table, first := buildTable(pools, r.NetBootPort)
	bridge := qemu.BridgeName(network)
	if r.Interface != "" {
		bridge = r.Interface
	}
	var serveErr error
	switch {
	case r.Netns == "" && r.Interface == "":
		serveErr = errors.New("the manager runs without a machine network namespace (--machine-netns); nothing serves DHCP on network " + network)
	case first == nil:
		serveErr = errors.New("no pool of network " + network + " parses")
	default:
		serveErr = r.serve(ctx, network, bridge, first, table)
	}
	var errs []error
	for _, p := range pools {
		errs = append(errs, r.report(ctx, p, bridge, serveErr))
	}
	if serveErr != nil && (r.Netns != "" || r.Interface != "") {
		errs = append(errs, serveErr)
	}
	return ctrl.Result{}, errors.Join(errs...)
}

// buildTable turns the pools' allocations into the agent's table; first is
// the first pool's options (its server address is the bridge's). Pools
// with networkBoot get netBootPort.
func buildTable(pools []*dhcpv1alpha1.IPPool, netBootPort int) (*dhcp.Table, *dhcp.Options) {
	slices.SortFunc(pools, func(a, b *dhcpv1alpha1.IPPool) int {
		if a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name {
			return -1
		}
		return 1
	})
	var opts []*dhcp.Options
	leases := map[string]dhcp.Lease{}
	// A MAC address is served to one namespace per network: the first
	// claim (ippool.Claim.Before), whatever order the pools come in, so a
	// namespace can never take another's MAC address (the ippool
	// controller refuses later claims; this settles two that raced).
	claims := map[string]ippool.Claim{}
	for _, p := range pools {
		pp, errs := ippool.Parse(&p.Spec, nil)
		if len(errs) > 0 {
			continue
		}
		c := p.Spec.IPv4Config
		lt := c.LeaseTime
		if lt == 0 {
			lt = ippool.DefaultLeaseTime
		}
		o := &dhcp.Options{
			Pool: p.Namespace + "/" + p.Name, Server: pp.Server, Prefix: pp.CIDR, Router: pp.Router,
			DNS: pp.DNS, NTP: pp.NTP, DomainName: c.DomainName, DomainSearch: c.DomainSearch,
			LeaseTime: time.Duration(lt) * time.Second, Namespace: p.Namespace,
		}
		if c.NetworkBoot {
			o.NetBootPort = netBootPort
		}
		opts = append(opts, o)
		for _, a := range p.Status.IPv4.Allocated {
			ip, err := netip.ParseAddr(a.IP)
			if err != nil {
				continue
			}
			mac := strings.ToLower(a.MACAddress)
			c := ippool.Claim{Namespace: p.Namespace, Pool: p.Name, Allocation: a}
			if prev, ok := claims[mac]; ok && !c.Before(prev) {
				continue
			}
			claims[mac] = c
			leases[mac] = dhcp.Lease{IP: ip, Hostname: a.Owner, Options: o}
		}
	}
	if len(opts) == 0 {
		return nil, nil
	}
	return dhcp.NewTable(opts, leases), opts[0]
}

// serve makes the bridge (and the namespace) if missing, gives it the
// server's address, and starts the network's server once.
func (r *Reconciler) serve(ctx context.Context, network, bridge string, o *dhcp.Options, t *dhcp.Table) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.servers[network]; ok {
		s.SetTable(t)
		if err := ensureAddress(ctx, r.Netns, bridge, netip.PrefixFrom(o.Server, o.Prefix.Bits())); err != nil {
			return err
		}
		return r.serveBoot(ctx, network, bridge, s, t)
	}
	if r.Interface == "" {
		if err := ensureBridge(ctx, r.Netns, bridge); err != nil {
			return err
		}
	}
	if err := ensureAddress(ctx, r.Netns, bridge, netip.PrefixFrom(o.Server, o.Prefix.Bits())); err != nil {
		return err
	}
	s := &dhcp.Server{Interface: bridge, Netns: r.Netns, Observe: dhcp.Record}
	s.SetTable(t)
	if err := s.Start(r.ctx); err != nil {
		return err
	}
	r.servers[network] = s
	return r.serveBoot(ctx, network, bridge, s, t)
}

// serveBoot makes the network's boot server listen on the server address
// of each pool with network boot (giving the bridge that address), and on
// nothing else. Called with r.mu held.
func (r *Reconciler) serveBoot(ctx context.Context, network, bridge string, s *dhcp.Server, t *dhcp.Table) error {
	var addrs []netip.AddrPort
	for _, o := range t.Pools() {
		if o.NetBootPort == 0 {
			continue
		}
		if err := ensureAddress(ctx, r.Netns, bridge, netip.PrefixFrom(o.Server, o.Prefix.Bits())); err != nil {
			return err
		}
		addrs = append(addrs, netip.AddrPortFrom(o.Server, uint16(o.NetBootPort))) //nolint:gosec // a port
	}
	b, ok := r.boot[network]
	if !ok {
		if len(addrs) == 0 {
			return nil
		}
		b = &dhcp.BootServer{
			Netns: r.Netns, ImageDir: r.ImageDir, Table: s.Table, Machine: r.machineOf,
			Served: r.served, Log: ctrl.Log.WithName(ControllerName).WithValues("network", network),
		}
		r.boot[network] = b
	}
	if err := b.Sync(addrs); err != nil {
		return fmt.Errorf("network boot on network %s: %w", network, err)
	}
	return nil
}

// machineOf is the Machine of namespace with a NIC whose MAC address is
// mac, from the manager's cache.
func (r *Reconciler) machineOf(ctx context.Context, namespace, mac string) (dhcp.BootTarget, error) {
	var list machinev1alpha1.MachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return dhcp.BootTarget{}, fmt.Errorf("listing the Machines of namespace %s: %w", namespace, err)
	}
	var found []*machinev1alpha1.Machine
	for i := range list.Items {
		m := &list.Items[i]
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		for _, n := range m.Spec.NetworkInterfaces {
			if strings.EqualFold(n.MACAddress, mac) {
				found = append(found, m)
				break
			}
		}
	}
	switch len(found) {
	case 0:
		return dhcp.BootTarget{}, dhcp.ErrNoMachine
	case 1:
		m := found[0]
		return dhcp.BootTarget{Namespace: m.Namespace, Name: m.Name, Image: m.Spec.Image, Object: m}, nil
	default:
		return dhcp.BootTarget{}, fmt.Errorf("%d Machines of namespace %s have MAC address %s", len(found), namespace, mac)
	}
}

// served records the NetworkBoot Event on the Machine.
func (r *Reconciler) served(_ context.Context, t dhcp.BootTarget) {
	if t.Object == nil || r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(t.Object, nil, corev1.EventTypeNormal, NetworkBootReason, "NetworkBoot", "served image %s", t.Image)
}

func (r *Reconciler) stop(network string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.servers[network]; ok {
		_ = s.Close()
		delete(r.servers, network)
	}
	if b, ok := r.boot[network]; ok {
		_ = b.Close()
		delete(r.boot, network)
	}
}

// BootServer returns the network boot server of a network (tests).
func (r *Reconciler) BootServer(network string) *dhcp.BootServer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.boot[network]
}

// Server returns the server of a network (tests).
func (r *Reconciler) Server(network string) *dhcp.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.servers[network]
}

// report writes status.agent and AgentReady.
func (r *Reconciler) report(ctx context.Context, p *dhcpv1alpha1.IPPool, bridge string, serveErr error) error {
	patcher := creconcile.NewStatusPatcher(r.Client, p)
	if serveErr != nil {
		p.Status.Agent = dhcpv1alpha1.AgentStatus{}
		creconcile.MarkFalse(&p.Status.Conditions, p.Generation, dhcpv1alpha1.AgentReadyCondition, dhcpv1alpha1.AgentUnavailableReason, serveErr.Error())
	} else {
		p.Status.Agent = dhcpv1alpha1.AgentStatus{Netns: r.Netns, Interface: bridge, Identity: r.Identity}
		msg := fmt.Sprintf("serving on %s in network namespace %s", bridge, r.Netns)
		if r.Netns == "" {
			msg = fmt.Sprintf("serving on %s (agent %s)", bridge, r.Identity)
		}
		creconcile.MarkTrue(&p.Status.Conditions, p.Generation, dhcpv1alpha1.AgentReadyCondition, dhcpv1alpha1.ServingReason, msg)
	}
	return patcher.Patch(ctx, p)
}

// ensureBridge makes the namespace and the bridge when missing, as
// QemuMachine does for its taps.
func ensureBridge(ctx context.Context, ns, bridge string) error {
	if !netns.IsRoot() {
		return qemu.ErrNotRoot
	}
	if _, err := os.Stat(filepath.Join(netns.Dir, ns)); err != nil {
		if _, err := netns.Run(ctx, "", "ip", "netns", "add", ns); err != nil {
			return err
		}
	}
	if _, err := netns.Run(ctx, ns, "ip", "link", "show", bridge); err != nil {
		if _, err := netns.Run(ctx, ns, "ip", "link", "add", bridge, "type", "bridge"); err != nil {
			return err
		}
	}
	_, err := netns.Run(ctx, ns, "ip", "link", "set", bridge, "up")
	return err
}

func ensureAddress(ctx context.Context, ns, bridge string, addr netip.Prefix) error {
	_, err := netns.Run(ctx, ns, "ip", "addr", "replace", addr.String(), "dev", bridge)
	return err
}
