// Package reconcile is Converge's reconcile kit: the few things every
// controller built on controller-runtime does the same way, written once.
// Converge's own controllers use it, and so can an operator author outside
// this repository; examples/kitchen in the Converge repository is a
// complete controller on it in 100 lines.
//
// What it offers:
//
//   - conditions stamped with the generation they describe ([SetCondition],
//     [MarkTrue], [MarkFalse], [MarkUnknown], [Remove], [IsTrue], [Reason]),
//     the kstatus Stalled condition ([StalledCondition], [MirrorStalled]) and
//     bounded condition messages ([Truncate], [MaxMessageBytes]);
//   - one deferred status write per reconcile ([StatusPatcher]): skipped when
//     nothing changed, sent with an optimistic lock, and on a conflict
//     re-applied to the fresh object with only this reconcile's changes, so a
//     condition another controller wrote in between survives;
//   - finalizers added before side effects and removed last
//     ([EnsureFinalizer], [RemoveFinalizer]), as optimistic-locked patches
//     that never overwrite the caller's in-memory status;
//   - watches on kinds known only at run time, started once per kind
//     ([KindWatcher]);
//   - reading one's own writes from the shared cache ([OwnWrites]): a
//     reconcile does not act on a cached object older than the controller's
//     own last write to it, without an uncached read to find out.
//
// A reconcile reads its object, takes a patcher, and defers the patch. The
// package name clashes with controller-runtime's pkg/reconcile, so import
// it under another name when both are needed (Converge uses creconcile):
//
//	import creconcile "github.com/converge-dev/converge/pkg/reconcile"
//
//	func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
//		obj := &v1alpha1.Thing{}
//		if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
//			return ctrl.Result{}, client.IgnoreNotFound(err)
//		}
//		patcher := creconcile.NewStatusPatcher(r.Client, obj)
//		defer func() { err = errors.Join(err, patcher.Patch(ctx, obj)) }()
//		if _, err := creconcile.EnsureFinalizer(ctx, r.Client, obj, finalizer); err != nil {
//			return ctrl.Result{}, err
//		}
//		...
//		creconcile.MarkTrue(&obj.Status.Conditions, obj.Generation, "Ready", "Succeeded", "...")
//		obj.Status.ObservedGeneration = obj.Generation
//		return ctrl.Result{}, nil
//	}
//
// What the kit expects of a kind:
//
//   - the status subresource is enabled (+kubebuilder:subresource:status) and
//     the status is at .status;
//   - conditions are at .status.conditions as []metav1.Condition, a list map
//     keyed by type (+listType=map, +listMapKey=type), as in Kubernetes' API
//     conventions; with .status.observedGeneration and a Ready condition,
//     kstatus (sigs.k8s.io/cli-utils/pkg/kstatus: kubectl wait, Flux, kpt)
//     reads the object's progress without knowing the kind;
//   - the client's scheme knows the Go type, so its group, version and kind
//     can be found ([StatusPatcher.Patch] needs them).
//
// And of the controller's RBAC: patch on the kind's status subresource and
// get on the kind (a conflict is resolved on a fresh read) for
// [StatusPatcher]; patch on the kind for [EnsureFinalizer] and
// [RemoveFinalizer].
package reconcile
