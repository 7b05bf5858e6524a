package certificate

import (
	"time"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// NewUntrackedReconciler is a Reconciler a test drives by hand: it reads
// through c (a cache the test may hold behind) and apiReader, and records
// its own writes, but no informer event ever clears those records: the
// test plays a cache that has not caught up. Its key gate is the one
// SetupWithManager builds (a nil gate panicked on a NotFound read).
func NewUntrackedReconciler(c client.Client, apiReader client.Reader, rec events.EventRecorder) *Reconciler {
	return &Reconciler{Client: c, APIReader: apiReader, Recorder: rec, Now: time.Now,
		BackoffBase: DefaultBackoffBase, BackoffMax: DefaultBackoffMax,
		certWrites: creconcile.NewOwnWrites(0), secretWrites: creconcile.NewOwnWrites(0),
		// As SetupWithManager makes it: a read behind the test's writes
		// (NotFound) forgets the Certificate in the gate.
		gate: newKeyGate(0)}
}
