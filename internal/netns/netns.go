// Package netns runs code and commands inside a named network namespace
// (/run/netns/<name>, as made by `ip netns add`). The empty name is the
// current namespace, so callers need no special case for the host.
package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dir is where iproute2 keeps named namespaces.
const Dir = "/run/netns"

// Do runs fn on an OS thread switched into the namespace. Sockets fn
// creates stay in that namespace after Do returns (a listener keeps
// accepting, a connection keeps working). If the thread cannot be switched
// back it is not returned to the Go scheduler.
func Do(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening the current network namespace: %w", err)
	}
	defer orig.Close()
	target, err := os.Open(filepath.Join(Dir, name))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening network namespace %q: %w", name, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %q (needs root / CAP_SYS_ADMIN): %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: Go terminates it when this goroutine ends.
		return fmt.Errorf("leaving network namespace %q: %w", name, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Command returns a command that runs inside the namespace (through
// `ip netns exec`), or directly when name is empty.
func Command(ctx context.Context, name, prog string, args ...string) *exec.Cmd {
	if name == "" {
		return exec.CommandContext(ctx, prog, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", name, prog}, args...)...)
}

// Run runs a command in the namespace and returns its error with the
// command's output.
func Run(ctx context.Context, name, prog string, args ...string) ([]byte, error) {
	out, err := Command(ctx, name, prog, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %v in netns %q: %w: %s", prog, args, name, err, out)
	}
	return out, nil
}

// IsRoot reports whether the process can manage namespaces and nftables.
func IsRoot() bool { return os.Geteuid() == 0 }
