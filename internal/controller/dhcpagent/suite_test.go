package dhcpagent_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/qemu/netboottest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// nb is the suite's image store, VM state directory and machine network
// namespace (the one the agent serves in; named after the process so that
// dhcptest.Sweep removes it if a run is killed).
var nb *netboottest.Suite

// machineNetns, imageStore and stateDir are nb's (network boot serves the
// store; the tests put images in it).
var machineNetns, imageStore, stateDir string

// The suite runs the IPAM controllers and the agent, with a machine network
// namespace when root (the agent makes it), and the Machine and QemuMachine
// controllers for the network boot test.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if nb, err = netboottest.New("machines"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nb.Close() // after the control plane: VMs quit, then the namespace goes
	machineNetns, imageStore, stateDir = nb.Netns, nb.ImageStore, nb.StateDir
	return testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"ippool", "dhcp-agent", "machine", "qemumachine"}
		nb.Machines(&o.Machines)
	}}, &env)
}
