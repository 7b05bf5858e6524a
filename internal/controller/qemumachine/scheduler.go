package qemumachine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// SchedulerName is the scheduler's controller name.
const SchedulerName = "qemumachine-scheduler"

// AgentLeaseLabel labels the heartbeat Lease of every machine agent; its
// holderIdentity is the agent's node.
const AgentLeaseLabel = "infrastructure.converge.dev/machine-agent"

// AgentLeaseName is the heartbeat Lease of the machine agent on node.
func AgentLeaseName(node string) string { return "machine-agent-" + node }

// DefaultAgentCheckInterval is how often the scheduler looks at the
// agents' heartbeats again for each QemuMachine.
const DefaultAgentCheckInterval = 5 * time.Second

// Scheduler runs in a manager whose QemuMachines run under per-node
// machine agents (--qemu-machines=agent): it runs no VM. It binds each
// QemuMachine without spec.nodeName to the node of a heartbeating agent,
// fewest bound QemuMachines first (then by name), and reports on each
// bound one whether its agent heartbeats (AgentReady). A binding is never
// changed: the VM of a QemuMachine whose agent stopped heartbeating may
// still run on that node, and starting it on a second one would run two.
type Scheduler struct {
	client.Client
	// Reader reads the agents' heartbeat Leases (live, not cached).
	Reader client.Reader
	// LeaseNamespace holds the agents' heartbeat Leases.
	LeaseNamespace string
	// CheckInterval is how often the heartbeats are looked at again;
	// DefaultAgentCheckInterval when zero.
	CheckInterval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu     sync.Mutex
	seen   map[string]heartbeatSeen // by node
	alive  map[string]bool          // the last listAgents
	listed time.Time                // when it ran
}

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch

// SetupWithManager registers the scheduler.
func (s *Scheduler) SetupWithManager(mgr ctrl.Manager) error {
	s.Client = mgr.GetClient()
	if s.Reader == nil {
		s.Reader = mgr.GetAPIReader()
	}
	if s.LeaseNamespace == "" {
		return errors.New("qemumachine scheduler: no lease namespace configured")
	}
	if s.CheckInterval <= 0 {
		s.CheckInterval = DefaultAgentCheckInterval
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return watchNodes(ctrl.NewControllerManagedBy(mgr).
		Named(SchedulerName).
		For(&infrastructurev1alpha1.QemuMachine{})).
		Complete(s)
}

// heartbeatSeen is when the scheduler last saw an agent's renewTime change.
type heartbeatSeen struct {
	renew time.Time
	at    time.Time
}

// liveAgents returns the nodes whose machine agent renewed its heartbeat
// Lease within the Lease's duration. Renewals are timed with this
// process's clock, when it saw renewTime change, so that a node clock
// ahead or behind cannot make a dead agent look alive; a Lease first seen
// counts as renewed when seen if its renewTime is recent by the wall clock.
//
// One List serves every QemuMachine looked at within half a CheckInterval:
// the Leases are listed about twice per interval, however many
// QemuMachines there are.
func (s *Scheduler) liveAgents(ctx context.Context) (map[string]bool, error) {
	now := s.Now()
	s.mu.Lock()
	if s.listed.IsZero() || now.Sub(s.listed) >= s.CheckInterval/2 || now.Before(s.listed) {
		s.mu.Unlock()
		alive, err := s.listAgents(ctx)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.alive, s.listed = alive, now
	}
	defer s.mu.Unlock()
	return maps.Clone(s.alive), nil
}

// listAgents lists the heartbeat Leases and times their renewals.
func (s *Scheduler) listAgents(ctx context.Context) (map[string]bool, error) {
	var leases coordinationv1.LeaseList
	if err := s.Reader.List(ctx, &leases, client.InNamespace(s.LeaseNamespace), client.HasLabels{AgentLeaseLabel}); err != nil {
		return nil, fmt.Errorf("listing the machine agents' Leases in %s: %w", s.LeaseNamespace, err)
	}
	now := s.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]heartbeatSeen{}
	}
	alive := map[string]bool{}
	for i := range leases.Items {
		sp := leases.Items[i].Spec
		if sp.HolderIdentity == nil || sp.RenewTime == nil || sp.LeaseDurationSeconds == nil {
			continue
		}
		node, renew := *sp.HolderIdentity, sp.RenewTime.Time
		duration := time.Duration(*sp.LeaseDurationSeconds) * time.Second
		seen, known := s.seen[node]
		switch {
		case !known && now.Before(renew.Add(duration)):
			seen = heartbeatSeen{renew: renew, at: now}
		case !known:
			seen = heartbeatSeen{renew: renew} // stale when first seen
		case !seen.renew.Equal(renew):
			seen = heartbeatSeen{renew: renew, at: now}
		}
		s.seen[node] = seen
		if !seen.at.IsZero() && now.Sub(seen.at) < duration {
			alive[node] = true
		}
	}
	return alive, nil
}

// Reconcile binds one QemuMachine, or reports on its agent.
func (s *Scheduler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	qm := &infrastructurev1alpha1.QemuMachine{}
	if err := s.Get(ctx, req.NamespacedName, qm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if qm.Spec.NodeName == "" && !qm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // never bound: no agent holds a finalizer on it
	}
	alive, err := s.liveAgents(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	patcher := creconcile.NewStatusPatcher(s.Client, qm)
	if qm.Spec.NodeName == "" {
		node, err := s.pick(ctx, alive)
		if err != nil {
			return ctrl.Result{}, err
		}
		if node == "" {
			creconcile.MarkFalse(&qm.Status.Conditions, qm.Generation, infrastructurev1alpha1.AgentReadyCondition,
				infrastructurev1alpha1.NoAgentAvailableReason,
				fmt.Sprintf("no machine agent heartbeats in namespace %s: the QemuMachine waits for one to bind it to its node", s.LeaseNamespace))
			return ctrl.Result{RequeueAfter: s.CheckInterval}, client.IgnoreNotFound(patcher.Patch(ctx, qm))
		}
		ctrl.LoggerFrom(ctx).Info("Binding QemuMachine to node", "node", node)
		base := qm.DeepCopy()
		qm.Spec.NodeName = node
		// Locked: two schedulers (or a user) binding at once cannot both win.
		if err := s.Patch(ctx, qm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("binding QemuMachine %s to node %s: %w", req, node, client.IgnoreNotFound(err))
		}
		return ctrl.Result{}, nil // the update event brings it back, bound
	}
	// The agent runs the VM; the Node its guest registers is recorded
	// here, by the manager (the agent has no right to Nodes).
	claimErr := claimNode(ctx, s.Client, qm)
	node := qm.Spec.NodeName
	if alive[node] {
		creconcile.MarkTrue(&qm.Status.Conditions, qm.Generation, infrastructurev1alpha1.AgentReadyCondition,
			infrastructurev1alpha1.AgentHeartbeatingReason, fmt.Sprintf("the machine agent on node %s heartbeats", node))
	} else {
		creconcile.MarkFalse(&qm.Status.Conditions, qm.Generation, infrastructurev1alpha1.AgentReadyCondition,
			infrastructurev1alpha1.AgentNotHeartbeatingReason,
			fmt.Sprintf("the machine agent on node %s is not heartbeating (Lease %s/%s): its VM, if any, is left as it is and never started on another node; the status is stale until the agent is back",
				node, s.LeaseNamespace, AgentLeaseName(node)))
	}
	return ctrl.Result{RequeueAfter: s.CheckInterval}, errors.Join(claimErr, client.IgnoreNotFound(patcher.Patch(ctx, qm)))
}

// pick is the live agent's node with the fewest bound QemuMachines (then
// the first by name); "" when no agent is alive.
func (s *Scheduler) pick(ctx context.Context, alive map[string]bool) (string, error) {
	if len(alive) == 0 {
		return "", nil
	}
	var all infrastructurev1alpha1.QemuMachineList
	if err := s.List(ctx, &all); err != nil {
		return "", fmt.Errorf("listing QemuMachines: %w", err)
	}
	load := map[string]int{}
	for i := range all.Items {
		load[all.Items[i].Spec.NodeName]++
	}
	nodes := make([]string, 0, len(alive))
	for n := range alive {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if load[nodes[i]] != load[nodes[j]] {
			return load[nodes[i]] < load[nodes[j]]
		}
		return nodes[i] < nodes[j]
	})
	return nodes[0], nil
}

// Heartbeat renews the heartbeat Lease of the machine agent on NodeName
// (AgentLeaseName, labelled AgentLeaseLabel) every Interval until its
// context ends. The Lease is left behind on exit: it expires after
// Duration, and the scheduler then reports the agent as not heartbeating.
type Heartbeat struct {
	// Client writes the Lease.
	Client client.Client
	// Namespace holds the Lease.
	Namespace string
	// NodeName is the agent's node (the Lease's holderIdentity).
	NodeName string
	// Duration is how long a renewal counts (rounded to seconds, at least
	// one); Interval how often it is renewed.
	Duration, Interval time.Duration
}

// Start renews the Lease until ctx ends; a failed renewal is logged and
// retried at the next interval.
func (h *Heartbeat) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("heartbeat")
	t := time.NewTicker(h.Interval)
	defer t.Stop()
	for {
		if err := h.renew(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Renewing the machine agent's heartbeat Lease")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: every agent heartbeats.
func (h *Heartbeat) NeedLeaderElection() bool { return false }

func (h *Heartbeat) renew(ctx context.Context) error {
	secs := int32(max(min(h.Duration.Round(time.Second)/time.Second, 3600), 1)) // clamped to [1s, 1h]
	node := h.NodeName
	spec := coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &metav1.MicroTime{Time: time.Now()}}
	l := &coordinationv1.Lease{}
	err := h.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: AgentLeaseName(node)}, l)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: AgentLeaseName(node),
			Labels: map[string]string{AgentLeaseLabel: "true"}}, Spec: spec}
		if err := h.Client.Create(ctx, l); err != nil {
			return fmt.Errorf("creating Lease %s/%s: %w", h.Namespace, l.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Lease %s/%s: %w", h.Namespace, AgentLeaseName(node), err)
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[AgentLeaseLabel] = "true"
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = spec.HolderIdentity, spec.LeaseDurationSeconds, spec.RenewTime
	if err := h.Client.Update(ctx, l); err != nil {
		return fmt.Errorf("renewing Lease %s/%s: %w", h.Namespace, l.Name, err)
	}
	return nil
}
