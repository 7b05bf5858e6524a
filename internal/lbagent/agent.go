// Package lbagent is the per-node load-balancer agent: it programs the
// nftables data plane for every Service address its node may announce,
// takes a Lease per address so that exactly one node answers ARP for it,
// sends gratuitous ARP on takeover, restores rules someone else edited, and
// publishes a Service's ingress and LoadBalancerReady=True only after it
// opened a connection to VIP:port through the data plane.
//
// Failover: every agent renews a heartbeat Lease (lb-agent-<node>) every
// RenewInterval. The holder of an address's Lease (lb-vip-<a-b-c-d>) owns it
// while its heartbeat is seen renewed within LeaseDuration (observed on the
// local clock, as client-go's leader election does, so clocks need not
// agree). When the heartbeat stops, the other eligible agents race to take
// the address's Lease with an optimistic lock; one wins, adds the address
// and sends gratuitous ARP. An agent whose own heartbeat has not been
// renewed for LeaseDuration withdraws every address (self-fencing), so two
// nodes never answer for one address for longer than that.
package lbagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/netns"
)

// +kubebuilder:rbac:groups="",resources=nodes;services;endpoints,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=lb.converge.dev,resources=l2advertisements,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete

// Defaults of Config.
const (
	DefaultLeaseDuration = 1500 * time.Millisecond
	DefaultRenewInterval = 300 * time.Millisecond
	DefaultProbeInterval = 10 * time.Second
	DefaultProbeTimeout  = time.Second
)

// Label keys on the agent's Leases.
const (
	agentLabel = "lb.converge.dev/agent"
	vipLabel   = "lb.converge.dev/vip"
)

// Config configures one agent.
type Config struct {
	// RESTConfig and Scheme reach the API server.
	RESTConfig *rest.Config
	Scheme     *runtime.Scheme
	// NodeName is this node (the Node object's name; its labels are
	// matched against L2Advertisement nodeSelectors).
	NodeName string
	// Interface announces addresses (gratuitous ARP) unless an
	// L2Advertisement names interfaces.
	Interface string
	// NetNS runs the data plane in a named network namespace; "" is the
	// agent's own (a DaemonSet with hostNetwork).
	NetNS string
	// LeaseNamespace holds the agents' Leases.
	LeaseNamespace string
	// DefaultClass serves Services without spec.loadBalancerClass.
	DefaultClass bool
	// LeaseDuration, RenewInterval, ProbeInterval and ProbeTimeout default
	// to the Default* constants.
	LeaseDuration, RenewInterval, ProbeInterval, ProbeTimeout time.Duration
	// DriftInterval is how often the kernel's rules are compared with what
	// the agent applied (default 1s).
	DriftInterval time.Duration
	Log           logr.Logger
}

func (c *Config) defaults() {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.DriftInterval == 0 {
		c.DriftInterval = time.Second
	}
}

// Run runs the agent until ctx ends, then removes every rule, address and
// Lease it made (peers take its addresses over at once).
func Run(ctx context.Context, c Config) error {
	c.defaults()
	if !netns.IsRoot() {
		return errors.New("the load-balancer agent needs root (CAP_NET_ADMIN, CAP_NET_RAW) to program nftables, add addresses and send ARP; run it as root")
	}
	if err := lbdataplane.Available(); err != nil {
		return err
	}
	ca, err := cache.New(c.RESTConfig, cache.Options{Scheme: c.Scheme, ByObject: map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{c.LeaseNamespace: {}}},
	}})
	if err != nil {
		return fmt.Errorf("creating the agent's cache: %w", err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: c.Scheme})
	if err != nil {
		return fmt.Errorf("creating the agent's client: %w", err)
	}
	a := newAgent(c, ca, cl)
	poke := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.poke() },
		UpdateFunc: func(any, any) { a.poke() },
		DeleteFunc: func(any) { a.poke() },
	}
	for _, o := range []client.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}, &lbv1alpha1.IPAddressPool{},
		&lbv1alpha1.L2Advertisement{}, &coordinationv1.Lease{}, &corev1.Node{}} {
		inf, err := ca.GetInformer(ctx, o)
		if err != nil {
			return fmt.Errorf("watching %T: %w", o, err)
		}
		if _, err := inf.AddEventHandler(poke); err != nil {
			return err
		}
	}
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	go func() { _ = ca.Start(cacheCtx) }()
	if !ca.WaitForCacheSync(ctx) {
		return errors.New("the agent's cache did not sync")
	}
	return a.run(ctx)
}
