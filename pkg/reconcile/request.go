package reconcile

import "sigs.k8s.io/controller-runtime/pkg/client"

// RequestedAtAnnotation asks a controller to reconcile an object now when
// its value changes (any string; a timestamp by convention), as Flux's
// reconcile.fluxcd.io/requestedAt does. `converge reconcile` and the push
// receiver set it.
const RequestedAtAnnotation = "converge.dev/reconcile-requested-at"

// MaxRequestedAtBytes is the longest request value recorded in a status
// (status.lastHandledReconcileAt is declared with this MaxLength).
const MaxRequestedAtBytes = 128

// RequestedAt returns the value of obj's [RequestedAtAnnotation] to record
// as handled, and whether there is one. A value longer than
// [MaxRequestedAtBytes] is not recorded: the API server would refuse the
// whole status write for it, and the object's own status would then stop
// moving for an annotation anyone who may edit it can set.
func RequestedAt(obj client.Object) (string, bool) {
	v, ok := obj.GetAnnotations()[RequestedAtAnnotation]
	if !ok || v == "" || len(v) > MaxRequestedAtBytes {
		return "", false
	}
	return v, true
}
