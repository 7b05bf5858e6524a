// Package ippool implements machine IPAM: the controllers that record an
// address for every NIC of a MachineNetworkConfig in its IPPool's status,
// keep the pools' counts and conditions, and make a MachineNetworkConfig
// for every Machine with NICs.
//
// An allocation is written to the pool's status with a patch locked on the
// pool's resourceVersion before anything else learns of it, and the DHCP
// agent serves only recorded allocations; so an address is never given to
// two MACs, across racing reconciles, several managers, restarts and stale
// caches. A conflict re-reads the pool from the API server and decides
// again.
package ippool

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/ippool"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "ippool"

// FieldManager is the field manager of every write this controller makes.
const FieldManager = "converge-ippool"

// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=ippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=ippools/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=machinenetworkconfigs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=machinenetworkconfigs/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler allocates and releases addresses.
type Reconciler struct {
	Client client.Client
	// APIReader reads pools past the cache after a conflict, and owners
	// before an allocation is dropped.
	APIReader client.Reader
	Recorder  events.EventRecorder
}

// conflictBackoff retries a pool write that met a conflict, each time on a
// fresh read; after the last step the reconcile is retried by the queue.
var conflictBackoff = wait.Backoff{Steps: 12, Duration: 5 * time.Millisecond, Factor: 1.5, Jitter: 1}

// SetupWithManager registers the MachineNetworkConfig, IPPool and Machine
// controllers.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &dhcpv1alpha1.IPPool{}, networkIndex, //nolint:forbidigo // index registration has no request context
		func(o client.Object) []string { return []string{o.(*dhcpv1alpha1.IPPool).Spec.NetworkName} }); err != nil {
		return fmt.Errorf("indexing IPPools by network: %w", err)
	}
	// A pool change can unblock configs waiting for an address: in its
	// namespace, and (a MAC address released) in every namespace with a
	// pool of the same network.
	waiting := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		namespaces := map[string]bool{o.GetNamespace(): true}
		if p, ok := o.(*dhcpv1alpha1.IPPool); ok {
			var same dhcpv1alpha1.IPPoolList
			if err := r.Client.List(ctx, &same, client.MatchingFields{networkIndex: p.Spec.NetworkName}, client.UnsafeDisableDeepCopy); err == nil {
				for i := range same.Items {
					namespaces[same.Items[i].Namespace] = true
				}
			}
		}
		var out []reconcile.Request
		for ns := range namespaces {
			var list dhcpv1alpha1.MachineNetworkConfigList
			if err := r.Client.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
				return nil
			}
			for i := range list.Items {
				if !allocated(&list.Items[i]) || (ns != o.GetNamespace() && holdsMAC(o, &list.Items[i])) {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				}
			}
		}
		return out
	})
	// A pool's spec changed (say, an address excluded): every config of
	// its namespace decides again, allocated ones included (a static
	// address the pool no longer gives out is released).
	respec := handler.Funcs{UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if e.ObjectOld.GetGeneration() == e.ObjectNew.GetGeneration() {
			return
		}
		var list dhcpv1alpha1.MachineNetworkConfigList
		if err := r.Client.List(ctx, &list, client.InNamespace(e.ObjectNew.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
			return
		}
		for i := range list.Items {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}}
	if err := ctrl.NewControllerManagedBy(mgr).Named(ControllerName).
		For(&dhcpv1alpha1.MachineNetworkConfig{}).
		Watches(&dhcpv1alpha1.IPPool{}, waiting).
		Watches(&dhcpv1alpha1.IPPool{}, respec).
		Complete(reconcile.Func(r.reconcileConfig)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named(ControllerName + "-pool").
		For(&dhcpv1alpha1.IPPool{}).
		Complete(reconcile.Func(r.reconcilePool)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named(ControllerName + "-machine").
		For(&machinev1alpha1.Machine{}).
		Owns(&dhcpv1alpha1.MachineNetworkConfig{}).
		Complete(reconcile.Func(r.reconcileMachine))
}

// holdsMAC reports whether pool o holds an address for one of m's MAC
// addresses: m, of another namespace, may have lost the MAC address to it
// (two claims racing).
func holdsMAC(o client.Object, m *dhcpv1alpha1.MachineNetworkConfig) bool {
	p, ok := o.(*dhcpv1alpha1.IPPool)
	if !ok {
		return false
	}
	for _, nc := range m.Spec.NetworkConfigs {
		if _, held := ippool.Find(p.Status.IPv4.Allocated, nc.MACAddress); held && nc.NetworkName == p.Spec.NetworkName {
			return true
		}
	}
	return false
}

func allocated(m *dhcpv1alpha1.MachineNetworkConfig) bool {
	if m.Status.ObservedGeneration != m.Generation || len(m.Status.NetworkConfigs) != len(m.Spec.NetworkConfigs) {
		return false
	}
	return !slices.ContainsFunc(m.Status.NetworkConfigs, func(s dhcpv1alpha1.NetworkConfigStatus) bool {
		return s.State != dhcpv1alpha1.StateAllocated
	})
}

// networkIndex indexes IPPools by spec.networkName.
const networkIndex = "spec.networkName"

// rival is the earliest claim of mac on network by a namespace other than
// ns (from the cache), if any: a MAC address is one namespace's per
// network, so another namespace's claim keeps it from ns.
func (r *Reconciler) rival(ctx context.Context, ns, network, mac string) (ippool.Claim, bool, error) {
	var list dhcpv1alpha1.IPPoolList
	if err := r.Client.List(ctx, &list, client.MatchingFields{networkIndex: network}, client.UnsafeDisableDeepCopy); err != nil {
		return ippool.Claim{}, false, fmt.Errorf("listing the IPPools of network %s: %w", network, err)
	}
	var best ippool.Claim
	found := false
	for i := range list.Items {
		p := &list.Items[i]
		if p.Namespace == ns || p.Spec.NetworkName != network {
			continue
		}
		if a, ok := ippool.Find(p.Status.IPv4.Allocated, mac); ok {
			c := ippool.Claim{Namespace: p.Namespace, Pool: p.Name, Allocation: a}
			if !found || c.Before(best) {
				best, found = c, true
			}
		}
	}
	return best, found, nil
}

// parsedPool is a pool with its parsed spec.
type parsedPool struct {
	obj *dhcpv1alpha1.IPPool
	p   *ippool.Pool
}

// pools lists and parses the pools of a namespace (from the cache). Pools
// that do not parse were refused at admission and are never used.
func (r *Reconciler) pools(ctx context.Context, ns string) ([]parsedPool, error) {
	var list dhcpv1alpha1.IPPoolList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing IPPools: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b dhcpv1alpha1.IPPool) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	out := make([]parsedPool, 0, len(list.Items))
	for i := range list.Items {
		p, errs := ippool.Parse(&list.Items[i].Spec, nil)
		if len(errs) > 0 || !list.Items[i].DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, parsedPool{obj: &list.Items[i], p: p})
	}
	return out, nil
}

// patchPool applies mutate to the pool and writes its status with an
// optimistic lock; on a conflict it reads the pool again from the API
// server and calls mutate again (mutate decides on the fresh pool, and
// returns false when there is nothing to write).
func (r *Reconciler) patchPool(ctx context.Context, pool *dhcpv1alpha1.IPPool, mutate func(*dhcpv1alpha1.IPPool, *ippool.Pool) bool) error {
	first := true
	err := wait.ExponentialBackoffWithContext(ctx, conflictBackoff, func(ctx context.Context) (bool, error) {
		if !first {
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
				return false, err
			}
		}
		first = false
		p, errs := ippool.Parse(&pool.Spec, nil)
		if len(errs) > 0 {
			return false, fmt.Errorf("IPPool %s/%s does not parse: %w", pool.Namespace, pool.Name, errs.ToAggregate())
		}
		after := pool.DeepCopy()
		if !mutate(after, p) {
			return true, nil
		}
		poolStatus(after, p)
		// The lock is what keeps an address from being given twice: the
		// kit's PatchStatusLocked returns a conflict, and the loop reads
		// the pool again and allocates anew.
		_, err := creconcile.PatchStatusLocked(ctx, r.Client, pool, after, client.FieldOwner(FieldManager))
		switch {
		case apierrors.IsConflict(err):
			return false, nil
		case err != nil:
			return false, err
		}
		*pool = *after
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("writing IPPool %s/%s status: %w", pool.Namespace, pool.Name, err)
	}
	return nil
}
