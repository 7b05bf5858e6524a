package lbipam

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbipam"
)

// reconcilePool drops assignments whose Service is gone (or re-created, or
// no longer a Converge LoadBalancer) — what the cache calls gone is
// checked against the API server, so a Service created a moment ago keeps
// its address — and keeps the counts and Ready current.
func (r *Reconciler) reconcilePool(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &lbv1alpha1.IPAddressPool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	rs, err := lbipam.ParseAddresses(pool.Spec.Addresses)
	if err != nil {
		return ctrl.Result{}, nil //nolint:nilerr // refused at admission; nothing to do
	}
	gone := map[lbv1alpha1.ServiceRef]bool{}
	for _, a := range pool.Status.Assignments {
		key := types.NamespacedName{Namespace: a.Service.Namespace, Name: a.Service.Name}
		svc := &corev1.Service{}
		if err := r.Client.Get(ctx, key, svc); err == nil && svc.UID == a.Service.UID && Wants(svc, r.DefaultClass) {
			// Held as the cache says: kept, without a read per holder on
			// every pool change (a deletion the cache has not seen yet
			// reaches the Service reconciler, which releases).
			continue
		}
		svc = &corev1.Service{}
		err := r.APIReader.Get(ctx, key, svc)
		switch {
		case apierrors.IsNotFound(err):
			gone[a.Service] = true
		case err != nil:
			return ctrl.Result{}, err
		case svc.UID != a.Service.UID || !Wants(svc, r.DefaultClass):
			gone[a.Service] = true
		}
	}
	probe := pool.DeepCopy()
	probe.Status.Assignments = slices.DeleteFunc(probe.Status.Assignments, func(a lbv1alpha1.Assignment) bool { return gone[a.Service] })
	poolStatus(lbipam.Pool{Obj: probe, Ranges: rs})
	if len(gone) == 0 && probe.Status.Assigned == pool.Status.Assigned && probe.Status.Available == pool.Status.Available &&
		probe.Status.ObservedGeneration == pool.Status.ObservedGeneration && len(pool.Status.Conditions) > 0 {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.patchPool(ctx, pool, func(p *lbv1alpha1.IPAddressPool) {
		p.Status.Assignments = slices.DeleteFunc(p.Status.Assignments, func(a lbv1alpha1.Assignment) bool { return gone[a.Service] })
	})
}
