// Package reconcile holds the few helpers every Converge controller uses the
// same way, so that each controller does them once and alike:
//
//   - conditions stamped with the generation they describe ([SetCondition],
//     [MarkTrue], [MarkFalse], [MarkUnknown]);
//   - one deferred status write per reconcile ([StatusPatcher]): skipped when
//     nothing changed, sent with an optimistic lock, and on a conflict
//     re-applied to the fresh object with only this reconcile's changes, so a
//     condition another controller wrote in between survives;
//   - finalizers added before side effects and removed last
//     ([EnsureFinalizer], [RemoveFinalizer]), as optimistic-locked patches
//     that never overwrite the caller's in-memory status;
//   - watches on kinds known only at run time, started once per kind
//     ([KindWatcher]: the provider kinds of an API contract);
//   - reading one's own writes from the shared cache ([OwnWrites]): a
//     reconcile does not act on a cached object older than the controller's
//     own last write to it, without an uncached read to find out.
//
// A reconcile reads its object, takes a patcher, and defers the patch:
//
//	func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
//		obj := &v1alpha1.Thing{}
//		if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
//			return ctrl.Result{}, client.IgnoreNotFound(err)
//		}
//		patcher := reconcile.NewStatusPatcher(r.Client, obj)
//		defer func() { err = errors.Join(err, patcher.Patch(ctx, obj)) }()
//		if _, err := reconcile.EnsureFinalizer(ctx, r.Client, obj, finalizer); err != nil {
//			return ctrl.Result{}, err
//		}
//		...
//		reconcile.MarkTrue(&obj.Status.Conditions, obj.Generation, "Ready", "Succeeded", "...")
//		obj.Status.ObservedGeneration = obj.Generation
//		return ctrl.Result{}, nil
//	}
//
// The status is expected at .status, its conditions at .status.conditions
// ([]metav1.Condition, a list map keyed by type), as in every Converge kind
// and in Kubernetes' API conventions.
package reconcile
