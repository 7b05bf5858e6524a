package reconcile

import (
	"bytes"
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// PatchStatusLocked writes obj's status as a merge patch from base (obj as
// this reconcile read or last wrote it), locked on base's resourceVersion,
// and sends nothing when the status did not change. Unlike
// [StatusPatcher], a conflict is returned as is (apierrors.IsConflict
// reports it) and nothing is re-applied: use it where the lock is what
// makes the write safe — an allocation from a shared pool that another
// reconcile may have taken meanwhile, or a checkpoint recording that a
// step starts, which two reconciles must never both record. The caller
// returns the conflict, and the rate-limited retry acts on a fresh read.
//
// On success obj holds what the server stored, and the caller may take it
// as the base of its next write. It reports whether it sent a patch.
func PatchStatusLocked(ctx context.Context, c client.Client, base, obj client.Object, opts ...client.SubResourcePatchOption) (bool, error) {
	// Unchanged is decided as StatusPatcher decides it: the same JSON.
	before, err := statusJSON(base)
	if err != nil {
		return false, err
	}
	after, err := statusJSON(obj)
	if err != nil {
		return false, err
	}
	if bytes.Equal(before, after) {
		return false, nil
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), opts...); err != nil {
		return false, fmt.Errorf("patching the status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

// EnsureFinalizerWith adds name to obj's finalizers together with what set
// changes in obj's spec or metadata (a provider ID naming the side effect
// the finalizer guards), in one merge patch locked on obj's
// resourceVersion, so that neither is stored without the other. It sends
// nothing and reports false when the finalizer is there and set changes
// nothing. Call it before the first side effect and before this reconcile
// changes the status: obj is refreshed whole from the response. A conflict
// is returned as is, as by [EnsureFinalizer].
func EnsureFinalizerWith(ctx context.Context, c client.Client, obj client.Object, name string, set func()) (bool, error) {
	base, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return false, fmt.Errorf("%T does not copy into a client.Object", obj)
	}
	controllerutil.AddFinalizer(obj, name)
	if set != nil {
		set()
	}
	if equality.Semantic.DeepEqual(base, obj) {
		return false, nil
	}
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("adding finalizer %s: %w", name, err)
	}
	return true, nil
}
