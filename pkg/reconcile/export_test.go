package reconcile

import "time"

// SetOwnWritesClock replaces w's clock.
func SetOwnWritesClock(w *OwnWrites, now func() time.Time) { w.now = now }
