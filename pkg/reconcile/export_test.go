package reconcile

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SetOwnWritesClock replaces w's clock.
func SetOwnWritesClock(w *OwnWrites, now func() time.Time) { w.now = now }

// StatusPatchData is what a StatusPatcher taken on read and patched with
// obj sends first: the bytes of its first status patch (nil when it sends
// nothing). No API server is involved.
func StatusPatchData(read, obj client.Object) ([]byte, error) {
	p := NewStatusPatcher(nil, read)
	if p.err != nil {
		return nil, p.err
	}
	after, err := statusJSON(obj)
	if err != nil {
		return nil, err
	}
	return p.patchData(obj, after)
}
