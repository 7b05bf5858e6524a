package reconcile

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// EnsureFinalizer adds name to obj's finalizers unless it is there, with a
// merge patch locked on obj's resourceVersion, and reports whether it added
// it. Call it before the first side effect the finalizer guards.
//
// Only obj's finalizers and resourceVersion are refreshed from the response:
// status the reconcile has already changed in memory is kept for its
// [StatusPatcher]. A conflict (another writer changed obj since it was read)
// is returned as is; the reconcile is retried on a fresh read, so a
// finalizer another controller added is never lost.
func EnsureFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) (bool, error) {
	if controllerutil.ContainsFinalizer(obj, name) {
		return false, nil
	}
	if err := patchFinalizers(ctx, c, obj, func(o client.Object) { controllerutil.AddFinalizer(o, name) }); err != nil {
		return false, fmt.Errorf("adding finalizer %s: %w", name, err)
	}
	return true, nil
}

// RemoveFinalizer removes name from obj's finalizers, if there, with a merge
// patch locked on obj's resourceVersion. Call it last, once what the
// finalizer guards is done. An object that is already gone is not an error.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) error {
	if !controllerutil.ContainsFinalizer(obj, name) {
		return nil
	}
	err := patchFinalizers(ctx, c, obj, func(o client.Object) { controllerutil.RemoveFinalizer(o, name) })
	if apierrors.IsNotFound(err) {
		controllerutil.RemoveFinalizer(obj, name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing finalizer %s: %w", name, err)
	}
	return nil
}

// patchFinalizers applies change to a copy of obj, patches it, and copies the
// resulting finalizers and resourceVersion back into obj.
func patchFinalizers(ctx context.Context, c client.Client, obj client.Object, change func(client.Object)) error {
	base, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%T does not copy into a client.Object", obj)
	}
	modified, _ := obj.DeepCopyObject().(client.Object)
	change(modified)
	if err := c.Patch(ctx, modified, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	obj.SetFinalizers(modified.GetFinalizers())
	obj.SetResourceVersion(modified.GetResourceVersion())
	return nil
}
