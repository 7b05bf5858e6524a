package ippool_test

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The suite runs the IPAM controllers (and no DHCP agent: tests start
// managers with one when they need it) with kube-controller-manager, whose
// garbage collector deletes configs of deleted Machines.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{ControllerManager: true, Manager: func(o *setup.Options) {
		o.Controllers = []string{"ippool"}
	}}, &env))
}
