package machinebmc_test

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The suite runs the Machine, KwokMachine and MachineBMC controllers (and
// with the last the BMC server) on a real API server with kwok.
func TestMain(m *testing.M) {
	lbtest.MaybeRunAgentChild() // TestPublishedThroughALoadBalancer's node agent
	os.Exit(testenv.Main(m, testenv.Options{Nodes: 1, Manager: func(o *setup.Options) {
		o.Controllers = []string{"machine", "kwokmachine", "machinebmc"}
	}}, &env))
}
