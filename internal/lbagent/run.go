package lbagent

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/lbdataplane"
)

// agent is the running state of one node's agent. Only run's goroutine
// touches it, except the prober, which has its own fields under mu.
type agent struct {
	cfg    Config
	cache  cache.Cache
	client client.Client // status writes and live reads
	leases client.Client // Lease writes, on a budget of their own
	nft    lbdataplane.NFT
	addrs  lbdataplane.Addresses
	wake   chan struct{}

	heartbeat   *coordinationv1.Lease
	lastRenew   time.Time // last successful heartbeat renewal
	lastAttempt time.Time
	// seen is when each agent's heartbeat renewTime was last seen to change.
	seen map[string]heartbeatSeen
	// freeSince is when an address was first seen without a live owner.
	freeSince map[netip.Addr]time.Time

	conntrack lbdataplane.Conntrack
	udpSwept  string       // udpFingerprint of the last successful conntrack sweep
	udpVIPs   []netip.Addr // the addresses that sweep looked at

	applied     string // last ruleset applied
	listing     string // kernel listing right after that apply
	lastDrift   time.Time
	owned       map[netip.Addr]bool // addresses on lo (label lo:cvglb)
	garpPending map[netip.Addr]int
	garpLast    map[netip.Addr]time.Time

	probes *prober
	// proxy is the userspace data plane (Config.Userspace); nil on the
	// kernel path.
	proxy *lbdataplane.Proxy
	// recorder records Events on Services (take-overs, failing sweeps);
	// nil records none.
	recorder events.EventRecorder
	// udpFailing: the last conntrack sweep failed (one Warning per run of
	// failures, not one per pass).
	udpFailing bool
}

type heartbeatSeen struct {
	renew metav1.MicroTime
	at    time.Time
}

func newAgent(c Config, ca cache.Cache, cl, leases client.Client) *agent {
	a := &agent{cfg: c, cache: ca, client: cl, leases: leases,
		nft: lbdataplane.NFT{NetNS: c.NetNS}, conntrack: lbdataplane.Conntrack{NetNS: c.NetNS}, addrs: lbdataplane.Addresses{NetNS: c.NetNS},
		wake: make(chan struct{}, 1), seen: map[string]heartbeatSeen{}, freeSince: map[netip.Addr]time.Time{},
		owned: map[netip.Addr]bool{}, garpPending: map[netip.Addr]int{}, garpLast: map[netip.Addr]time.Time{}}
	a.probes = &prober{a: a, results: map[string]probeResult{}, queue: make(chan probeJob, 1024), inflight: map[string]bool{}}
	if c.Userspace {
		a.proxy = &lbdataplane.Proxy{NetNS: c.NetNS}
	}
	return a
}

func (a *agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *agent) run(ctx context.Context) error {
	log := a.cfg.Log
	if a.proxy == nil {
		if err := a.addrs.Ensure(ctx); err != nil {
			return err
		}
		// Addresses left by a crashed run are not ours any more: the Leases
		// decide again.
		if err := a.addrs.Delete(ctx); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.probes.run(ctx) }()
	defer func() {
		wg.Wait()
		a.cleanup()
	}()
	tick := time.NewTicker(a.cfg.RenewInterval / 3)
	defer tick.Stop()
	for {
		if err := a.sync(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Syncing the load-balancer data plane")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.wake:
		case <-tick.C:
		}
	}
}

// sync is one level-based pass: heartbeat, desired state, rules, owners,
// addresses, probes.
func (a *agent) sync(ctx context.Context) error {
	now := time.Now()
	a.renewHeartbeat(ctx, now)
	healthy := now.Sub(a.lastRenew) < a.cfg.LeaseDuration
	alive := a.observeHeartbeats(ctx, now, healthy)

	want, err := a.desired(ctx)
	if err != nil {
		return err
	}
	var dp []lbdataplane.Service
	for _, st := range want {
		dp = append(dp, st.dataplane...)
	}
	if a.proxy == nil {
		if err := a.program(ctx, lbdataplane.Render(dp), now); err != nil {
			return err
		}
		a.flushStaleUDP(want, dp)
	}

	owned := a.ownAll(ctx, want, now, healthy, alive)
	a.releaseUnwanted(ctx, want)
	if a.proxy != nil {
		a.listen(owned)
	} else {
		a.converge(ctx, owned, now)
	}
	// Probe only what this node really holds: an address whose add failed
	// must not be declared reachable through the output hook's DNAT alone.
	held := make(map[netip.Addr]*vipState, len(owned))
	for ip, st := range owned {
		if a.owned[ip] {
			held[ip] = st
		}
	}
	a.probes.schedule(held, now)
	return nil
}

// program applies the ruleset when it changed, and re-applies it when the
// kernel's table no longer matches what was applied (drift).
func (a *agent) program(ctx context.Context, rs string, now time.Time) error {
	if rs == a.applied && now.Sub(a.lastDrift) < a.cfg.DriftInterval {
		return nil
	}
	if rs == a.applied {
		a.lastDrift = now
		cur, err := a.nft.List(ctx)
		if err != nil {
			return err
		}
		if cur == a.listing {
			return nil
		}
		a.cfg.Log.Info("Restoring nftables rules changed by someone else", "table", lbdataplane.Table)
	}
	if err := a.nft.Apply(ctx, rs); err != nil {
		return err
	}
	cur, err := a.nft.List(ctx)
	if err != nil {
		return err
	}
	a.applied, a.listing, a.lastDrift = rs, cur, now
	return nil
}

// flushStaleUDP deletes the conntrack entries of UDP flows to endpoints
// the rules no longer send to (lbdataplane.Conntrack says why), after the
// rules changed: what the sweep keeps (endpoints, draining endpoints) or
// the addresses it looks at changed since the last successful one. The
// addresses are this node's and those of the last sweep, so a Service that
// went away leaves no flow behind. A failure is logged and retried on the
// next pass.
func (a *agent) flushStaleUDP(want map[netip.Addr]*vipState, dp []lbdataplane.Service) {
	vips := make([]netip.Addr, 0, len(want)+len(a.udpVIPs))
	for ip := range want {
		vips = append(vips, ip)
	}
	for _, ip := range a.udpVIPs {
		if want[ip] == nil {
			vips = append(vips, ip)
		}
	}
	slices.SortFunc(vips, func(x, y netip.Addr) int { return x.Compare(y) })
	fp := udpFingerprint(vips, dp)
	if fp == a.udpSwept {
		return
	}
	n, err := a.conntrack.FlushStaleUDP(dp, vips)
	if err != nil {
		a.cfg.Log.Error(err, "Deleting conntrack entries of UDP flows to removed endpoints")
		if !a.udpFailing {
			for _, ip := range vips {
				if st := want[ip]; st != nil {
					a.event(st.services, corev1.EventTypeWarning, ConntrackSweepFailedReason, "FlushConntrack",
						"Node %s could not delete the conntrack entries of UDP flows to removed endpoints of %s (retried on every change; until then those flows keep their old endpoint): %v", a.cfg.NodeName, ip, err)
				}
			}
		}
		a.udpFailing = true
		return
	}
	a.udpFailing = false
	if n > 0 {
		a.cfg.Log.Info("Deleted conntrack entries of UDP flows to removed endpoints", "entries", n)
	}
	a.udpSwept = fp
	a.udpVIPs = a.udpVIPs[:0]
	for ip := range want {
		a.udpVIPs = append(a.udpVIPs, ip)
	}
}

// Event reasons the agent records on Services.
const (
	// AnnouncedReason: this node took over an address of the Service (it
	// was free, or its holder stopped renewing its heartbeat).
	AnnouncedReason = "AddressAnnounced"
	// ConntrackSweepFailedReason: UDP flows to removed endpoints could not
	// be moved (the first failure of a run of them).
	ConntrackSweepFailedReason = "ConntrackSweepFailed"
)

// event records an Event on each of svcs.
func (a *agent) event(svcs []*corev1.Service, typ, reason, action, format string, args ...any) {
	if a.recorder == nil {
		return
	}
	for _, s := range svcs {
		a.recorder.Eventf(s, nil, typ, reason, action, format, args...)
	}
}

// udpFingerprint is what a conntrack sweep depends on, in a canonical
// form: the addresses and every UDP port's endpoints and draining ones.
func udpFingerprint(vips []netip.Addr, dp []lbdataplane.Service) string {
	var lines []string
	for _, s := range dp {
		for _, p := range s.Ports {
			if p.Protocol != "udp" {
				continue
			}
			eps := make([]string, 0, len(p.Endpoints)+len(p.Draining))
			for _, e := range p.Endpoints {
				eps = append(eps, e.String())
			}
			for _, e := range p.Draining {
				eps = append(eps, "~"+e.String())
			}
			slices.Sort(eps)
			lines = append(lines, fmt.Sprintf("%s/%d=%s", s.VIP, p.Port, strings.Join(eps, ",")))
		}
	}
	slices.Sort(lines)
	return fmt.Sprint(vips) + "|" + strings.Join(lines, ";")
}

// renewHeartbeat renews (or creates) this agent's heartbeat Lease.
func (a *agent) renewHeartbeat(ctx context.Context, now time.Time) {
	if now.Sub(a.lastAttempt) < a.cfg.RenewInterval {
		return
	}
	a.lastAttempt = now
	name := heartbeatName(a.cfg.NodeName)
	if a.heartbeat == nil {
		l := &coordinationv1.Lease{}
		err := a.leases.Get(ctx, client.ObjectKey{Namespace: a.cfg.LeaseNamespace, Name: name}, l)
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: a.cfg.LeaseNamespace, Name: name,
				Labels: map[string]string{agentLabel: "true"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.cfg.NodeName),
					LeaseDurationSeconds: ptr.To(int32(min(a.cfg.LeaseDuration.Round(time.Second)/time.Second, 3600))), //nolint:gosec // clamped to an hour
					RenewTime:            ptr.To(metav1.NewMicroTime(now))}}
			if err := a.leases.Create(ctx, l); err != nil {
				a.cfg.Log.Error(err, "Creating the heartbeat Lease")
				return
			}
			a.heartbeat, a.lastRenew = l, now
			return
		case err != nil:
			a.cfg.Log.Error(err, "Reading the heartbeat Lease")
			return
		}
		a.heartbeat = l
	}
	l := a.heartbeat.DeepCopy()
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	l.Spec.HolderIdentity = ptr.To(a.cfg.NodeName)
	if err := a.leases.Update(ctx, l); err != nil {
		a.heartbeat = nil // re-read next time
		a.cfg.Log.V(1).Info("Renewing the heartbeat Lease failed", "error", err.Error())
		return
	}
	a.heartbeat, a.lastRenew = l, now
}

// observeHeartbeats returns the agents whose heartbeat was seen renewed
// within LeaseDuration (on this clock), this one included when healthy.
func (a *agent) observeHeartbeats(ctx context.Context, now time.Time, healthy bool) map[string]bool {
	var list coordinationv1.LeaseList
	alive := map[string]bool{}
	if err := a.cache.List(ctx, &list, client.InNamespace(a.cfg.LeaseNamespace), client.MatchingLabels{agentLabel: "true"}); err != nil {
		return alive
	}
	for _, l := range list.Items {
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if holder == "" || l.Spec.RenewTime == nil {
			continue
		}
		s, ok := a.seen[holder]
		if !ok || !s.renew.Equal(l.Spec.RenewTime) {
			s = heartbeatSeen{renew: *l.Spec.RenewTime, at: now}
			a.seen[holder] = s
		}
		if now.Sub(s.at) < a.cfg.LeaseDuration {
			alive[holder] = true
		}
	}
	alive[a.cfg.NodeName] = healthy
	return alive
}

// preferred picks the live agent that should take a free address first
// (rendezvous hashing), so addresses spread over nodes.
func preferred(ip netip.Addr, alive map[string]bool) string {
	names := make([]string, 0, len(alive))
	for n, ok := range alive {
		if ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	best, bestScore := "", uint64(0)
	for _, n := range names {
		h := fnv.New64a()
		_, _ = h.Write([]byte(n + "/" + ip.String()))
		if s := h.Sum64(); best == "" || s > bestScore {
			best, bestScore = n, s
		}
	}
	return best
}

// takeOverWorkers bounds the Lease writes one pass makes at once: a node
// taking over many addresses writes their Leases in parallel instead of
// one after another (each is a round trip to the API server).
const takeOverWorkers = 16

// ownAll returns the wanted addresses this node owns now: those whose
// Lease it holds, and those it took over in this pass (free, or their
// holder dead), their Leases written in parallel.
func (a *agent) ownAll(ctx context.Context, want map[netip.Addr]*vipState, now time.Time, healthy bool, alive map[string]bool) map[netip.Addr]*vipState {
	owned := map[netip.Addr]*vipState{}
	var takes []takeOver
	for ip, st := range want {
		hold, take := a.own(ctx, ip, now, healthy, alive)
		switch {
		case hold:
			owned[ip] = st
		case take != nil:
			takes = append(takes, *take)
		}
	}
	var mu sync.Mutex
	sem := make(chan struct{}, takeOverWorkers)
	var wg sync.WaitGroup
	for _, t := range takes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if a.take(ctx, t) {
				mu.Lock()
				owned[t.ip] = want[t.ip]
				mu.Unlock()
				from := "no node"
				if t.from != "" {
					from = "node " + t.from
				}
				a.event(want[t.ip].services, corev1.EventTypeNormal, AnnouncedReason, "Announce",
					"Node %s announces %s (taken over from %s)", a.cfg.NodeName, t.ip, from)
			}
		}()
	}
	wg.Wait()
	for ip := range owned {
		delete(a.freeSince, ip)
	}
	return owned
}

// takeOver is the Lease write that makes this node the holder of ip.
type takeOver struct {
	ip     netip.Addr
	lease  *coordinationv1.Lease
	create bool   // the Lease does not exist yet
	from   string // the previous holder
}

// own reports whether this node holds the address now, or else the
// take-over to attempt when the address is free or its holder is dead
// (nil when it must leave it).
func (a *agent) own(ctx context.Context, ip netip.Addr, now time.Time, healthy bool, alive map[string]bool) (bool, *takeOver) {
	me := a.cfg.NodeName
	l := &coordinationv1.Lease{}
	err := a.cache.Get(ctx, client.ObjectKey{Namespace: a.cfg.LeaseNamespace, Name: leaseName(ip)}, l)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, nil
	}
	exists := err == nil
	holder := ""
	if exists {
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	if holder == me {
		delete(a.freeSince, ip)
		return healthy, nil // self-fencing: an agent that cannot renew withdraws
	}
	if holder != "" && alive[holder] {
		delete(a.freeSince, ip)
		return false, nil
	}
	if !healthy {
		return false, nil
	}
	since, ok := a.freeSince[ip]
	if !ok {
		since = now
		a.freeSince[ip] = now
	}
	if preferred(ip, alive) != me && now.Sub(since) < 2*a.cfg.RenewInterval {
		return false, nil // give the preferred node a head start
	}
	if !exists {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: a.cfg.LeaseNamespace, Name: leaseName(ip),
			Labels: map[string]string{vipLabel: "true"}}}
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(me), AcquireTime: ptr.To(metav1.NewMicroTime(now)),
			RenewTime: ptr.To(metav1.NewMicroTime(now))}
		return false, &takeOver{ip: ip, lease: l, create: true}
	}
	l = l.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(me)
	l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	return false, &takeOver{ip: ip, lease: l, from: holder}
}

// take writes a take-over's Lease: a create, or an update checked against
// the resourceVersion the decision was made on, so that of two agents
// racing for an address exactly one wins. Safe for concurrent use.
func (a *agent) take(ctx context.Context, t takeOver) bool {
	var err error
	if t.create {
		err = a.leases.Create(ctx, t.lease)
	} else {
		err = a.leases.Update(ctx, t.lease)
	}
	if err != nil {
		a.leaseRefused(err, t.ip) // another agent won, or the API refused
		return false
	}
	a.cfg.Log.Info("Took over address", "address", t.ip.String(), "previousHolder", t.from)
	return true
}

// leaseRefused logs a failed take-over of ip's Lease unless another agent
// simply won it (AlreadyExists, Conflict): an RBAC or API failure would
// otherwise leave this node never taking addresses, with no word why.
func (a *agent) leaseRefused(err error, ip netip.Addr) {
	if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
		return
	}
	a.cfg.Log.Error(err, "Taking over the address's Lease", "address", ip.String())
}

// releaseUnwanted deletes the Leases this node holds for addresses no
// longer assigned to a Service it serves.
func (a *agent) releaseUnwanted(ctx context.Context, want map[netip.Addr]*vipState) {
	var list coordinationv1.LeaseList
	if err := a.cache.List(ctx, &list, client.InNamespace(a.cfg.LeaseNamespace), client.MatchingLabels{vipLabel: "true"}); err != nil {
		return
	}
	for i := range list.Items {
		l := &list.Items[i]
		if ptr.Deref(l.Spec.HolderIdentity, "") != a.cfg.NodeName {
			continue
		}
		keep := false
		for ip := range want {
			if leaseName(ip) == l.Name {
				keep = true
			}
		}
		if !keep {
			_ = a.leases.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion})
		}
	}
}

// converge makes the loopback interface hold exactly the owned addresses and
// sends gratuitous ARP (three times, 200 ms apart) for each new one.
func (a *agent) converge(ctx context.Context, owned map[netip.Addr]*vipState, now time.Time) {
	for ip := range a.owned {
		if owned[ip] == nil {
			if err := a.addrs.Remove(ctx, ip); err != nil {
				a.cfg.Log.Error(err, "Withdrawing address", "address", ip.String())
				continue
			}
			delete(a.owned, ip)
			delete(a.garpPending, ip)
		}
	}
	var added []netip.Addr
	for ip := range owned {
		if !a.owned[ip] {
			added = append(added, ip)
		}
	}
	if err := a.addrs.Add(ctx, added...); err != nil {
		a.cfg.Log.Error(err, "Adding addresses", "addresses", len(added))
		added = a.present(ctx, added)
	}
	for _, ip := range added {
		a.owned[ip] = true
		a.garpPending[ip] = 3
		a.garpLast[ip] = time.Time{}
	}
	// Gratuitous ARP: three rounds 200 ms apart for each new address, all
	// addresses due on one interface in one send.
	due := map[string][]netip.Addr{}
	for ip, st := range owned {
		if a.owned[ip] && a.garpPending[ip] > 0 && now.Sub(a.garpLast[ip]) >= 200*time.Millisecond {
			due[st.iface] = append(due[st.iface], ip)
			a.garpPending[ip]--
			a.garpLast[ip] = now
		}
	}
	for iface, ips := range due {
		if err := lbdataplane.GratuitousARP(a.cfg.NetNS, iface, ips...); err != nil {
			a.cfg.Log.Error(err, "Sending gratuitous ARP", "interface", iface, "addresses", len(ips))
		}
	}
}

// listen makes the userspace proxy serve exactly the owned addresses (the
// kernel path's converge, without addresses or ARP: the host already has
// them). A port that cannot be bound is logged; its probe then reports it
// unreachable on the Service.
func (a *agent) listen(owned map[netip.Addr]*vipState) {
	var dp []lbdataplane.Service
	for ip, st := range owned {
		dp = append(dp, st.dataplane...)
		a.owned[ip] = true
	}
	for ip := range a.owned {
		if owned[ip] == nil {
			delete(a.owned, ip)
		}
	}
	if err := a.proxy.Set(dp); err != nil {
		a.cfg.Log.Error(err, "Serving addresses in userspace")
	}
}

// present returns those of ips that are on the interface (after a batch
// add failed part way).
func (a *agent) present(ctx context.Context, ips []netip.Addr) []netip.Addr {
	on, err := a.addrs.List(ctx)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ip := range ips {
		if slices.Contains(on, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// cleanup removes everything the agent made: addresses (on lo),
// rules, its address Leases (so peers take over at once) and heartbeat.
func (a *agent) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) //nolint:forbidigo // the run context is done
	defer cancel()
	if a.proxy != nil {
		a.proxy.Close()
	} else {
		if err := a.addrs.Delete(ctx); err != nil {
			a.cfg.Log.Error(err, "Removing the announced addresses")
		}
		if err := a.nft.Delete(ctx); err != nil {
			a.cfg.Log.Error(err, "Removing the nftables table")
		}
	}
	var list coordinationv1.LeaseList
	if err := a.leases.List(ctx, &list, client.InNamespace(a.cfg.LeaseNamespace)); err == nil {
		for i := range list.Items {
			l := &list.Items[i]
			if ptr.Deref(l.Spec.HolderIdentity, "") == a.cfg.NodeName {
				_ = a.leases.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion})
			}
		}
	}
}
