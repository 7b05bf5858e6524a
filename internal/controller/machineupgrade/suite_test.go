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

// The suite's manager only serves the webhooks: each test starts the
// controllers in a manager of its own (startManager), which the restart
// tests stop and start again. The controller manager runs the disruption
// controller (PodDisruptionBudgets) and the garbage collector.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Nodes: 1, NoManager: true, ControllerManager: true}, &env))
}

// startManager runs the upgrade's controllers in a new manager; stop
// cancels it abruptly (as a killed process: nothing more is written).
func startManager(t *testing.T) (stop func() error) {
	t.Helper()
	return env.StartManager(t, func(o *setup.Options) { o.Controllers = controllers })
}
