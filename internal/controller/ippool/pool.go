package ippool

import (
	"context"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/dhcp"
	"github.com/converge-dev/converge/internal/ippool"
)

// reconcilePool drops allocations whose owner is gone (or was re-created)
// — checked against the API server, not the cache, so a config created a
// moment ago keeps its address — and keeps counts and conditions current.
// The owners' finalizers release addresses promptly; this is the safety
// net for an owner whose finalizer was removed by hand.
func (r *Reconciler) reconcilePool(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &dhcpv1alpha1.IPPool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			dhcp.PoolUsed.DeletePartialMatch(prometheus.Labels{"namespace": req.Namespace, "name": req.Name})
			dhcp.PoolAvailable.DeletePartialMatch(prometheus.Labels{"namespace": req.Namespace, "name": req.Name})
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	p, errs := ippool.Parse(&pool.Spec, nil)
	if len(errs) > 0 {
		return ctrl.Result{}, nil // refused at admission; nothing to count
	}
	gone := map[string]bool{}
	for _, a := range pool.Status.IPv4.Allocated {
		m := &dhcpv1alpha1.MachineNetworkConfig{}
		key := types.NamespacedName{Namespace: pool.Namespace, Name: a.Owner}
		// The cache first: an owner it holds with the same UID exists, and
		// costs no API read (a pool of N allocations would otherwise cost N
		// reads per change). Only an owner missing from the cache is
		// confirmed against the API server.
		if err := r.Client.Get(ctx, key, m); err == nil && (a.OwnerUID == "" || string(m.UID) == a.OwnerUID) {
			continue
		}
		err := r.APIReader.Get(ctx, key, m)
		switch {
		case apierrors.IsNotFound(err):
			gone[allocKey(a)] = true
		case err != nil:
			return ctrl.Result{}, err
		case a.OwnerUID != "" && string(m.UID) != a.OwnerUID:
			gone[allocKey(a)] = true
		}
	}
	probe := pool.DeepCopy()
	probe.Status.IPv4.Allocated = slices.DeleteFunc(probe.Status.IPv4.Allocated, func(a dhcpv1alpha1.Allocation) bool { return gone[allocKey(a)] })
	poolStatus(probe, p)
	dhcp.PoolUsed.WithLabelValues(pool.Namespace, pool.Name, pool.Spec.NetworkName).Set(float64(probe.Status.IPv4.Used))
	dhcp.PoolAvailable.WithLabelValues(pool.Namespace, pool.Name, pool.Spec.NetworkName).Set(float64(probe.Status.IPv4.Available))
	if equality.Semantic.DeepEqual(probe.Status, pool.Status) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.patchPool(ctx, pool, func(after *dhcpv1alpha1.IPPool, _ *ippool.Pool) bool {
		after.Status.IPv4.Allocated = slices.DeleteFunc(after.Status.IPv4.Allocated, func(a dhcpv1alpha1.Allocation) bool { return gone[allocKey(a)] })
		return true
	})
}

// allocKey identifies one allocation: the address and its holder.
func allocKey(a dhcpv1alpha1.Allocation) string { return a.IP + "/" + a.Owner + "/" + a.OwnerUID }
