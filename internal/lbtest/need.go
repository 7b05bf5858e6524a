package lbtest

import (
	"testing"

	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/testenv"
)

// NeedNetwork skips the test outside CI when it cannot make network
// namespaces and nftables rules (not root, or nft missing); in CI it fails,
// since CI installs nftables and runs as root.
func NeedNetwork(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "load-balancer network test", "network namespaces, nftables")
	if err := lbdataplane.Available(); err != nil {
		testenv.NeedPeer(t, "load-balancer network test", err.Error())
	}
}
