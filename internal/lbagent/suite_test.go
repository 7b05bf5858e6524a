package lbagent_test

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The suite serves webhooks only; each test starts its own manager with the
// loadbalancer-ipam controller (so one can be stopped mid-way) and agents as
// child processes of this test binary in node namespaces (so one can be
// killed like a dying node).
func TestMain(m *testing.M) {
	lbtest.MaybeRunAgentChild()
	os.Exit(testenv.Main(m, testenv.Options{NoManager: true}, &env))
}
