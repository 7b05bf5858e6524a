package ippool

import (
	"fmt"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/ippool"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// poolStatus recomputes a pool's counts, Ready and Exhausted from its
// allocations; pure.
func poolStatus(pool *dhcpv1alpha1.IPPool, p *ippool.Pool) {
	used, available := p.Counts(pool.Status.IPv4.Allocated)
	pool.Status.IPv4.Used = int32(used)           //nolint:gosec // bounded by MaxItems
	pool.Status.IPv4.Available = int32(available) //nolint:gosec // bounded by the range size
	pool.Status.ObservedGeneration = pool.Generation
	name := pool.Namespace + "/" + pool.Name
	conds := &pool.Status.Conditions
	if available == 0 {
		reconcile.MarkTrue(conds, pool.Generation, dhcpv1alpha1.ExhaustedCondition, dhcpv1alpha1.PoolExhaustedReason,
			fmt.Sprintf("IPPool %s: all %d addresses of %s are allocated", name, p.Size(), p.Range))
	} else {
		reconcile.MarkFalse(conds, pool.Generation, dhcpv1alpha1.ExhaustedCondition, dhcpv1alpha1.AddressesAvailableReason,
			fmt.Sprintf("%d of %d addresses free", available, p.Size()))
	}
	switch {
	case pool.Spec.Paused:
		reconcile.MarkFalse(conds, pool.Generation, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.PausedReason,
			"spec.paused: no new allocations; existing ones are served")
	case available == 0:
		reconcile.MarkFalse(conds, pool.Generation, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.PoolExhaustedReason,
			fmt.Sprintf("IPPool %s has no free address", name))
	default:
		reconcile.MarkTrue(conds, pool.Generation, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.AddressesAvailableReason,
			fmt.Sprintf("%d of %d addresses free", available, p.Size()))
	}
}
