package testenv

import (
	"testing"

	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/testpeer"
)

// NeedRoot skips t outside CI when the process is not root (what names the
// test, needs says what root is for); in CI, which runs as root, it fails.
func NeedRoot(t testing.TB, what, needs string) {
	t.Helper()
	if !netns.IsRoot() {
		NeedPeer(t, what, "needs root ("+needs+")")
	}
}

// NeedPeer fails t in CI, where every peer is installed, and otherwise skips
// it with a loud message: what names the test, why what is missing.
func NeedPeer(t testing.TB, what, why string) {
	t.Helper()
	testpeer.NeedPeer(t, what, why)
}
