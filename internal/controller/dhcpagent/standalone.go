package dhcpagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
)

// What the standalone agent (RunAgent) needs besides the controller's
// rules above: its Lease per network. `make generate` writes the agent's
// own ClusterRole from this package's markers to
// config/rbac/dhcp-agent/role.yaml (the chart binds it to the agents'
// ServiceAccount).
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

// Defaults of AgentConfig.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewInterval = 2 * time.Second
	// DefaultResync is how often the leader re-reports its pools' status
	// even when nothing changed (a write lost while the API server was
	// away is retried sooner, at every renewal).
	DefaultResync = 5 * time.Minute
)

// statusTimeout bounds each status or Event write of the standalone agent.
const statusTimeout = 10 * time.Second

// LeaseName is the name of the Lease that elects the agent answering on
// network.
func LeaseName(network string) string { return "dhcp-" + network }

// AgentConfig configures one standalone agent (`converge agent dhcp`).
type AgentConfig struct {
	// RESTConfig and Scheme reach the API server.
	RESTConfig *rest.Config
	Scheme     *runtime.Scheme
	// Network is the spec.networkName of the IPPools served.
	Network string
	// Interface is the interface to serve on (the attachment's).
	Interface string
	// Netns is the named network namespace holding Interface; "" is the
	// process's own (a Pod's).
	Netns string
	// LeaseNamespace holds the Lease LeaseName(Network).
	LeaseNamespace string
	// Identity names this agent in the Lease and status.agent; empty is
	// the host name and a random suffix.
	Identity string
	// ImageDir and NetBootPort configure network boot, as in the manager.
	ImageDir    string
	NetBootPort int
	// LeaseDuration, RenewInterval and Resync default to the Default*
	// constants.
	LeaseDuration, RenewInterval, Resync time.Duration
	// Log is the agent's logger (the caller names the network in it).
	Log logr.Logger
}

func (c *AgentConfig) defaults() error {
	if c.Network == "" {
		return errors.New("the network to serve is required (--network)")
	}
	if c.Interface == "" {
		return errors.New("the interface to serve on is required (--interface)")
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.RenewInterval >= c.LeaseDuration {
		return fmt.Errorf("the renew interval (%s) must be shorter than the lease duration (%s)", c.RenewInterval, c.LeaseDuration)
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.Identity == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Identity = host + "_" + hex.EncodeToString(b)
	}
	return nil
}

// RunAgent runs the DHCP agent of one network until ctx ends: it watches
// the IPPools (its own informer cache: IPPools, and Machines once a pool
// asks for network boot) and, while it holds the network's Lease, serves
// them with the same Reconciler as the manager's agent. A standby keeps
// its cache warm and serves nothing. When ctx ends it stops serving and
// releases the Lease, so a standby takes over at its next renewal.
//
// While the API server is unreachable the holder keeps serving from its
// cache (it cannot renew, but it cannot learn of a successor either);
// two agents answering at once give the same answers from the same
// allocations, which a client tolerates, while no agent answering would
// lose its lease.
func RunAgent(ctx context.Context, c AgentConfig) error {
	if err := c.defaults(); err != nil {
		return err
	}
	// Informers start on first use: IPPools below, Machines only when a
	// pool with networkBoot looks one up. Nothing else is read.
	ca, err := cache.New(c.RESTConfig, cache.Options{Scheme: c.Scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return fmt.Errorf("creating the agent's cache: %w", err)
	}
	// Reads come from the cache; writes (status, Events) give up after
	// statusTimeout, so that an API server that stopped answering never
	// stalls the loop renewing the Lease.
	wcfg := rest.CopyConfig(c.RESTConfig)
	wcfg.Timeout = statusTimeout
	cl, err := client.New(wcfg, client.Options{Scheme: c.Scheme, Cache: &client.CacheOptions{Reader: ca}})
	if err != nil {
		return fmt.Errorf("creating the agent's client: %w", err)
	}
	// The Lease client gives up on a request well before the Lease could
	// expire, so an unreachable API server never stalls the loop.
	lcfg := rest.CopyConfig(c.RESTConfig)
	lcfg.Timeout = c.RenewInterval
	leases, err := client.New(lcfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		return fmt.Errorf("creating the agent's Lease client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		return fmt.Errorf("creating the agent's event client: %w", err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	defer broadcaster.Shutdown()

	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	inf, err := ca.GetInformer(ctx, &dhcpv1alpha1.IPPool{})
	if err != nil {
		return fmt.Errorf("watching IPPools: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return fmt.Errorf("watching IPPools: %w", err)
	}
	// The cache outlives ctx a little: the last status writes and the
	// Lease release happen after it.
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	go func() { _ = ca.Start(cacheCtx) }()
	if !ca.WaitForCacheSync(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("the agent's cache did not sync")
	}
	broadcaster.StartRecordingToSink(cacheCtx.Done())
	r := &Reconciler{Client: cl, Netns: c.Netns, Interface: c.Interface, Identity: c.Identity, ImageDir: c.ImageDir,
		NetBootPort: c.NetBootPort, Recorder: broadcaster.NewRecorder(c.Scheme, "converge-dhcp-agent")}
	r.Begin(ctx)
	e := &elector{c: leases, key: client.ObjectKey{Namespace: c.LeaseNamespace, Name: LeaseName(c.Network)},
		id: c.Identity, duration: c.LeaseDuration, log: c.Log}
	c.Log.Info("Starting the DHCP agent", "interface", c.Interface, "netns", c.Netns,
		"lease", e.key.String(), "identity", c.Identity)
	return runLoop(ctx, c, r, e, wake)
}

// runLoop renews (or contends for) the Lease every RenewInterval and,
// while leading, serves the network again whenever a pool changed, a
// previous pass failed, or Resync passed.
func runLoop(ctx context.Context, c AgentConfig, r *Reconciler, e *elector, wake <-chan struct{}) error {
	log := c.Log
	tick := time.NewTicker(c.RenewInterval)
	defer tick.Stop()
	leading, dirty := false, true
	var lastSync time.Time
	for {
		now := time.Now()
		was := leading
		leading = e.step(ctx, now)
		switch {
		case leading && !was:
			log.Info("Serving the network: this agent holds its Lease")
			dirty = true
		case !leading && was:
			log.Info("Standing by: another agent holds the network's Lease")
			r.StopAll()
		}
		if leading && (dirty || now.Sub(lastSync) >= c.Resync) {
			if err := r.SyncNetwork(ctx, c.Network); err != nil && ctx.Err() == nil {
				log.Error(err, "Serving the network")
				dirty = true
			} else {
				dirty, lastSync = false, now
			}
		}
		select {
		case <-ctx.Done():
			r.StopAll()
			if leading {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				e.release(rctx)
				cancel()
			}
			log.Info("Stopped the DHCP agent")
			return nil
		case <-wake:
			dirty = true
		case <-tick.C:
		}
	}
}

// elector holds one Lease with an optimistic lock, as client-go's leader
// election does (expiry observed on the local clock, so clocks need not
// agree), except that a holder that cannot reach the API server keeps
// leading: it stops only when it sees another holder.
type elector struct {
	c        client.Client
	key      client.ObjectKey
	id       string
	duration time.Duration
	log      logr.Logger

	leading bool
	// seenRenew is the other holder's last renewTime seen, seenAt when
	// this agent saw it change.
	seenRenew metav1.MicroTime
	seenAt    time.Time
}

// step renews or takes the Lease when it may, and reports whether this
// agent leads.
func (e *elector) step(ctx context.Context, now time.Time) bool {
	l := &coordinationv1.Lease{}
	err := e.c.Get(ctx, e.key, l)
	switch {
	case apierrors.IsNotFound(err):
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.key.Namespace, Name: e.key.Name}}
		e.fill(l, now, true)
		if err := e.c.Create(ctx, l); err != nil {
			e.refused(err)
			return e.leading
		}
		e.leading = true
		return true
	case err != nil:
		e.log.V(1).Info("Reading the network's Lease failed; keeping the current role", "error", err.Error(), "leading", e.leading)
		return e.leading
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if holder != e.id && holder != "" {
		renew := ptr.Deref(l.Spec.RenewTime, metav1.MicroTime{})
		if !e.seenRenew.Equal(&renew) || e.seenAt.IsZero() {
			e.seenRenew, e.seenAt = renew, now
		}
		d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
		if now.Sub(e.seenAt) < max(d, time.Second) {
			e.leading = false
			return false
		}
		e.log.Info("Taking over the network's Lease from an agent that stopped renewing it", "previousHolder", holder)
	}
	l = l.DeepCopy()
	e.fill(l, now, holder != e.id)
	if err := e.c.Update(ctx, l); err != nil {
		e.refused(err)
		if apierrors.IsConflict(err) && holder != e.id {
			return false
		}
		return e.leading
	}
	e.leading = true
	return true
}

// fill makes l held by this agent from now; acquired says it just took it.
func (e *elector) fill(l *coordinationv1.Lease, now time.Time, acquired bool) {
	l.Spec.HolderIdentity = ptr.To(e.id)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(min(max(e.duration.Round(time.Second)/time.Second, 1), 3600)))
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	if acquired {
		l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
		if l.ResourceVersion != "" {
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		}
	}
}

// refused logs a Lease write the API server refused, unless another agent
// simply won the race.
func (e *elector) refused(err error) {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return
	}
	e.log.Error(err, "Writing the network's Lease", "lease", e.key.String())
}

// release clears the holder when this agent holds the Lease, so that a
// standby takes over at its next renewal instead of after the Lease
// expires.
func (e *elector) release(ctx context.Context) {
	l := &coordinationv1.Lease{}
	if err := e.c.Get(ctx, e.key, l); err != nil {
		e.log.Error(err, "Releasing the network's Lease", "lease", e.key.String())
		return
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != e.id {
		return
	}
	l.Spec.HolderIdentity = nil
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	if err := e.c.Update(ctx, l); err != nil {
		e.log.Error(err, "Releasing the network's Lease", "lease", e.key.String())
		return
	}
	e.leading = false
	e.log.Info("Released the network's Lease", "lease", e.key.String())
}
