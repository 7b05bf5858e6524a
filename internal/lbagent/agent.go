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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/useragent"
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

	// DefaultKubeAPIQPS and DefaultKubeAPIBurst are the client-side budget
	// of the agent's status writes, and of its cache's lists and watches
	// (controller-runtime's own defaults). Lease writes have a budget of
	// their own: leaseBudget.
	DefaultKubeAPIQPS   = 20
	DefaultKubeAPIBurst = 30
)

// leaseBudget is the token bucket of the agent's Lease writes (its
// heartbeat and address take-overs), apart from every other request so
// that a burst of status patches can never delay a failover or starve
// the heartbeat into self-fencing. Its rate is ten heartbeats' worth
// (at least 20 QPS), its burst enough to take over a node's worth of
// addresses at once.
func leaseBudget(renew time.Duration) (qps float32, burst int) {
	qps = float32(10 * time.Second / max(renew, time.Millisecond))
	return max(qps, 20), 200
}

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
	// KubeAPIQPS and KubeAPIBurst bound the agent's Service status writes
	// (default DefaultKubeAPIQPS, DefaultKubeAPIBurst); its watches and its
	// Lease writes have budgets of their own.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// Userspace serves addresses with lbdataplane.Proxy instead of
	// nftables: no root needed, no ARP, no addresses added (use addresses
	// the host already has, such as 127.240.0.0/24). For one node: the
	// local mode of `converge up`.
	Userspace bool
	Log       logr.Logger
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
	if c.KubeAPIQPS == 0 {
		c.KubeAPIQPS = DefaultKubeAPIQPS
	}
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = DefaultKubeAPIBurst
	}
}

// User-Agents of the agent's clients. The API server records the part
// before the first "/" as the field manager of a write, so a Lease's
// managedFields show which client wrote it.
const (
	agentUserAgent = "lbagent"        // converge-lbagent
	leaseUserAgent = "lbagent-leases" // converge-lbagent-leases
)

// withBudget is cfg with a token bucket of its own of qps and burst
// (client-go's default when none is set is 5 QPS, two thirds of which
// the heartbeat alone uses at the default renew interval) and the
// User-Agent ua.
func withBudget(cfg *rest.Config, qps float32, burst int, ua string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter, cfg.QPS, cfg.Burst = nil, qps, burst
	cfg.UserAgent = useragent.For(ua)
	return cfg
}

// Run runs the agent until ctx ends, then removes every rule, address and
// Lease it made (peers take its addresses over at once).
func Run(ctx context.Context, c Config) error {
	c.defaults()
	if !c.Userspace {
		if !netns.IsRoot() {
			return errors.New("the load-balancer agent needs root (CAP_NET_ADMIN, CAP_NET_RAW) to program nftables, add addresses and send ARP; run it as root (or --userspace for one node without root)")
		}
		if err := lbdataplane.Available(); err != nil {
			return err
		}
	}
	// Three token buckets: the cache's lists and watches, status writes
	// (KubeAPIQPS), and Lease writes (leaseBudget), so that neither of the
	// first two can delay a heartbeat or a take-over.
	ca, err := cache.New(withBudget(c.RESTConfig, DefaultKubeAPIQPS, DefaultKubeAPIBurst, agentUserAgent), cache.Options{Scheme: c.Scheme, ByObject: map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{c.LeaseNamespace: {}}},
	}})
	if err != nil {
		return fmt.Errorf("creating the agent's cache: %w", err)
	}
	cl, err := client.New(withBudget(c.RESTConfig, c.KubeAPIQPS, c.KubeAPIBurst, agentUserAgent), client.Options{Scheme: c.Scheme})
	if err != nil {
		return fmt.Errorf("creating the agent's client: %w", err)
	}
	qps, burst := leaseBudget(c.RenewInterval)
	leases, err := client.New(withBudget(c.RESTConfig, qps, burst, leaseUserAgent), client.Options{Scheme: c.Scheme})
	if err != nil {
		return fmt.Errorf("creating the agent's Lease client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(withBudget(c.RESTConfig, c.KubeAPIQPS, c.KubeAPIBurst, agentUserAgent))
	if err != nil {
		return fmt.Errorf("creating the agent's event client: %w", err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	defer broadcaster.Shutdown()
	a := newAgent(c, ca, cl, leases)
	a.recorder = broadcaster.NewRecorder(c.Scheme, "converge-lbagent")
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
	broadcaster.StartRecordingToSink(ctx.Done())
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	go func() { _ = ca.Start(cacheCtx) }()
	if !ca.WaitForCacheSync(ctx) {
		return errors.New("the agent's cache did not sync")
	}
	return a.run(ctx)
}
