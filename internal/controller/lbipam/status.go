package lbipam

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbipam"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// allocatorReasons are the LoadBalancerReady reasons this controller owns;
// the agent owns the others.
var allocatorReasons = map[string]bool{
	lbv1alpha1.PoolExhaustedReason:           true,
	lbv1alpha1.AddressUnavailableReason:      true,
	lbv1alpha1.PoolNotAllowedReason:          true,
	lbv1alpha1.ListenerLimitExceededReason:   true,
	lbv1alpha1.AssignmentLimitExceededReason: true,
	lbv1alpha1.TooManyPortsReason:            true,
	lbv1alpha1.SharingKeyTooLongReason:       true,
}

// patchPool applies mutate to a copy of the pool, recomputes the counts and
// Ready, and patches the status with an optimistic lock (resourceVersion):
// a concurrent writer makes this fail with a conflict instead of losing or
// duplicating an assignment.
func (r *Reconciler) patchPool(ctx context.Context, pool *lbv1alpha1.IPAddressPool, mutate func(*lbv1alpha1.IPAddressPool)) error {
	after := pool.DeepCopy()
	mutate(after)
	if rs, err := lbipam.ParseAddresses(after.Spec.Addresses); err == nil {
		poolStatus(lbipam.Pool{Obj: after, Ranges: rs})
	}
	// The lock is what keeps an address from being given twice: the kit's
	// PatchStatusLocked returns a conflict and never re-applies.
	if _, err := reconcile.PatchStatusLocked(ctx, r.Client, pool, after); err != nil {
		return fmt.Errorf("IPAddressPool %s: %w", pool.Name, err)
	}
	*pool = *after
	return nil
}

// poolStatus recomputes counts and the Ready condition.
func poolStatus(p lbipam.Pool) {
	assigned, available := lbipam.Counts(p)
	p.Obj.Status.Assigned, p.Obj.Status.Available = assigned, available
	p.Obj.Status.ObservedGeneration = p.Obj.Generation
	if available <= 0 {
		reconcile.MarkFalse(&p.Obj.Status.Conditions, p.Obj.Generation, lbv1alpha1.ReadyCondition,
			lbv1alpha1.PoolExhaustedReason, fmt.Sprintf("all %d addresses are assigned", assigned))
		return
	}
	reconcile.MarkTrue(&p.Obj.Status.Conditions, p.Obj.Generation, lbv1alpha1.ReadyCondition,
		lbv1alpha1.AddressesAvailableReason, fmt.Sprintf("%d of %d addresses free", available, int64(assigned)+available))
}

// setNotReady sets LoadBalancerReady=False (and, when ingress is non-nil, the
// ingress) on the Service through reconcile's StatusPatcher: skipped when
// unchanged, optimistic-locked, and on conflict only this change is
// re-applied, so the agent's concurrent write is not lost.
func (r *Reconciler) setNotReady(ctx context.Context, svc *corev1.Service, ingress []corev1.LoadBalancerIngress, reason, msg string) error {
	p := reconcile.NewStatusPatcher(r.Client, svc)
	after := svc.DeepCopy()
	reconcile.SetCondition(&after.Status.Conditions, svc.Generation, lbv1alpha1.LoadBalancerReadyCondition, metav1.ConditionFalse, reason, msg)
	if ingress != nil {
		after.Status.LoadBalancer.Ingress = ingress
	}
	if err := p.Patch(ctx, after); err != nil {
		return fmt.Errorf("patching Service %s/%s status: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// assigned records that the Service holds addr: an ingress for another
// address is withdrawn, and an allocator failure gives way to
// AwaitingAnnouncement until the agent probes the address.
func (r *Reconciler) assigned(ctx context.Context, svc *corev1.Service, addr string) error {
	stale := false
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != addr {
			stale = true
		}
	}
	c := meta.FindStatusCondition(svc.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
	if c != nil && !allocatorReasons[c.Reason] && !stale {
		return nil // the agent's word stands
	}
	var ingress []corev1.LoadBalancerIngress
	if stale {
		ingress = []corev1.LoadBalancerIngress{}
	}
	return r.setNotReady(ctx, svc, ingress, lbv1alpha1.AwaitingAnnouncementReason,
		fmt.Sprintf("address %s assigned; waiting for an agent to announce it and reach an endpoint through it", addr))
}

// clearStatus removes what Converge wrote on a Service it no longer serves.
func (r *Reconciler) clearStatus(ctx context.Context, svc *corev1.Service) error {
	if meta.FindStatusCondition(svc.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition) == nil {
		return nil
	}
	p := reconcile.NewStatusPatcher(r.Client, svc)
	after := svc.DeepCopy()
	reconcile.Remove(&after.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
	after.Status.LoadBalancer.Ingress = nil
	return p.Patch(ctx, after)
}
