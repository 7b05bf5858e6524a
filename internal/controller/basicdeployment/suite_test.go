package basicdeployment_test

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The suite runs the real scheduler, kube-controller-manager (garbage
// collector) and one kwok node, so Pods become Running and Ready, and both
// Converge controllers of the pair: BasicDeployment and BasicReplicaSet.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{ControllerManager: true, Scheduler: true, Nodes: 1}, &env))
}
