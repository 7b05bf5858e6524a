package machine_test

import (
	"os"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The suite runs the Machine and KwokMachine controllers on a real API
// server with kube-controller-manager (the disruption controller keeps
// PodDisruptionBudgets' status, which evictions read), kube-scheduler (a
// tenant's Node keeps other tenants' Pods off) and kwok.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{ControllerManager: true, Scheduler: true, Nodes: 1, Manager: func(o *setup.Options) {
		o.Controllers = []string{"machine", "kwokmachine"}
		o.Machines.DrainTimeout = time.Hour
	}}, &env))
}
