package lbipam

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
)

// ReconcilePool runs the pool reconciler once, for tests that give it a
// cache of their own.
func (r *Reconciler) ReconcilePool(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.reconcilePool(ctx, req)
}
