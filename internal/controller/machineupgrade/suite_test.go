package machineupgrade_test

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// controllers are the controllers an upgrade needs: the Machine and its
// KwokMachine provider, the BMCs (Redfish), and the upgrade itself.
var controllers = []string{"machine", "kwokmachine", "machinebmc", "machineupgrade"}

// The suite runs those controllers on a real API server with kwok, the
// scheduler (Pods to drain) and the controller manager.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Nodes: 1, Scheduler: true, Manager: func(o *setup.Options) {
		o.Controllers = controllers
	}}, &env))
}
