package reconcile

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// SetOwnWritesClock replaces w's clock.
func SetOwnWritesClock(w *OwnWrites, now func() time.Time) { w.now = now }

// StatusPatchData is what a StatusPatcher taken on read and patched with
// obj sends first: the bytes of its first status patch (nil when it sends
// nothing). No API server is involved.
func StatusPatchData(scheme *runtime.Scheme, read, obj client.Object) ([]byte, error) {
	p := &StatusPatcher{}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(read)
	if err != nil {
		return nil, err
	}
	p.before = statusOf(u)
	afterObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	after := statusOf(afterObj)
	change, err := diffStatus(p.before, after)
	if err != nil {
		return nil, err
	}
	base := &unstructured.Unstructured{Object: afterObj}
	base.Object["status"] = runtime.DeepCopyJSONValue(p.before)
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, err
	}
	target, err := change.applyTo(base)
	if err != nil {
		return nil, err
	}
	target.SetGroupVersionKind(gvk)
	from := base.DeepCopy()
	from.SetGroupVersionKind(gvk)
	return client.MergeFromWithOptions(from, client.MergeFromWithOptimisticLock{}).Data(target)
}
