package lbtest

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/netns"
)

// NeedNetwork skips the test outside CI when it cannot make network
// namespaces and nftables rules (not root, or nft missing); in CI it fails,
// since CI installs nftables and runs as root.
func NeedNetwork(t testing.TB) {
	t.Helper()
	var why string
	switch {
	case !netns.IsRoot():
		why = "needs root (network namespaces, nftables)"
	case lbdataplane.Available() != nil:
		why = lbdataplane.Available().Error()
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("load-balancer network test: %s", why)
	}
	t.Skipf("*** SKIPPING load-balancer network test: %s ***", why)
}
