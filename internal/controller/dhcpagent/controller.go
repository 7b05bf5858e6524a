// Package dhcpagent runs Converge's DHCP agent (internal/dhcp) in the
// manager, for local mode: one server per machine network, bound to the
// network's bridge inside the network namespace Converge made for machine
// NICs (--machine-netns, where QemuMachine puts its bridges and taps). It
// serves from the allocations recorded in IPPool status, read through the
// manager's cache; when the API server is unreachable the cache and the
// servers keep what they last saw, so existing clients keep renewing.
//
// It is a controller, so it runs on the leader only: one agent answers per
// network. In a cluster the agent would be a Deployment per network with an
// attachment to that network (see docs/dhcp.md); that mode is not built.
package dhcpagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/dhcp"
	"github.com/converge-dev/converge/internal/ippool"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/qemu"
	creconcile "github.com/converge-dev/converge/internal/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "dhcp-agent"

// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=ippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=ippools/status,verbs=get;patch;update

// Reconciler runs the DHCP servers.
type Reconciler struct {
	Client client.Client
	// Netns is the machine network namespace; empty: no agent (AgentReady
	// False, AgentUnavailable).
	Netns string
	// Identity names this manager in status.agent.
	Identity string

	mu      sync.Mutex
	ctx     context.Context //nolint:containedctx // the manager's, for servers outliving a reconcile
	servers map[string]*dhcp.Server
}

// SetupWithManager registers the controller and the runnable stopping the
// servers with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	if r.Identity == "" {
		r.Identity, _ = os.Hostname()
	}
	r.servers = map[string]*dhcp.Server{}
	ready := make(chan struct{})
	if err := mgr.Add(runnable(func(ctx context.Context) error {
		r.mu.Lock()
		r.ctx = ctx
		r.mu.Unlock()
		close(ready)
		<-ctx.Done()
		r.mu.Lock()
		defer r.mu.Unlock()
		for k, s := range r.servers {
			_ = s.Close()
			delete(r.servers, k)
		}
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
	table, first := buildTable(pools)
	bridge := qemu.BridgeName(network)
	var serveErr error
	switch {
	case r.Netns == "":
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
	if serveErr != nil && r.Netns != "" {
		errs = append(errs, serveErr)
	}
	return ctrl.Result{}, errors.Join(errs...)
}

// buildTable turns the pools' allocations into the agent's table; first is
// the first pool's options (its server address is the bridge's).
func buildTable(pools []*dhcpv1alpha1.IPPool) (*dhcp.Table, *dhcp.Options) {
	slices.SortFunc(pools, func(a, b *dhcpv1alpha1.IPPool) int {
		if a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name {
			return -1
		}
		return 1
	})
	var opts []*dhcp.Options
	leases := map[string]dhcp.Lease{}
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
			LeaseTime: time.Duration(lt) * time.Second,
		}
		opts = append(opts, o)
		for _, a := range p.Status.IPv4.Allocated {
			ip, err := netip.ParseAddr(a.IP)
			if err != nil {
				continue
			}
			leases[a.MACAddress] = dhcp.Lease{IP: ip, Hostname: a.Owner, Options: o}
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
		return ensureAddress(ctx, r.Netns, bridge, netip.PrefixFrom(o.Server, o.Prefix.Bits()))
	}
	if err := ensureBridge(ctx, r.Netns, bridge); err != nil {
		return err
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
	return nil
}

func (r *Reconciler) stop(network string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.servers[network]; ok {
		_ = s.Close()
		delete(r.servers, network)
	}
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
		creconcile.MarkTrue(&p.Status.Conditions, p.Generation, dhcpv1alpha1.AgentReadyCondition, dhcpv1alpha1.ServingReason,
			fmt.Sprintf("serving on %s in network namespace %s", bridge, r.Netns))
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
