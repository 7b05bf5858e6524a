//go:build unix

package localcp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// startLockPath is shared by every localcp on the machine.
var startLockPath = filepath.Join(os.TempDir(), "converge-localcp-start.lock")

// acquireStartLock serialises the bootstrap of control planes on one machine.
// kube-apiserver's rbac/bootstrap-roles hook gives up (and exits) after 30s;
// several API servers bootstrapping at once on a small machine (parallel test
// packages, a benchmark beside `converge up`) can starve each other past it.
// The lock is held only until the API server is ready, and is released by
// the kernel if the holder dies.
func acquireStartLock(ctx context.Context, progress func(string, ...any)) (release func(), err error) {
	f, err := os.OpenFile(startLockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", startLockPath, err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", startLockPath, err)
		}
		if !told {
			progress("waiting for another local control plane on this machine to finish starting")
			told = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
