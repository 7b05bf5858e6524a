package databasebackup

import "context"

// SetBeforeRelease sets the hook run between recording the dump and
// removing the finalizer, so a test can kill the manager exactly there.
func SetBeforeRelease(r *Reconciler, f func(context.Context) error) { r.beforeRelease = f }
