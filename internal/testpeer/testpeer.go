// Package testpeer decides what a test does when a real peer it drives is
// missing: in CI, where every peer is installed, it fails; elsewhere it
// skips loudly. It imports nothing of Converge, so packages that testenv
// itself depends on (the BMC servers, started by the manager) can use it.
package testpeer

import (
	"os"
	"os/exec"
	"testing"
)

// NeedPeer fails t in CI and otherwise skips it with a loud message: what
// names the test, why what is missing.
func NeedPeer(t testing.TB, what, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s: %s", what, why)
	}
	t.Skipf("*** SKIPPING %s: %s ***", what, why)
}

// NeedTool is NeedPeer for a command that must be on PATH; pkg is the Debian
// package that provides it.
func NeedTool(t testing.TB, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		NeedPeer(t, t.Name(), name+" is not installed (apt-get install "+pkg+")")
	}
}
