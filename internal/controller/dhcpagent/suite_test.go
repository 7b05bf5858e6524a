package dhcpagent_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// machineNetns is the namespace the suite's agent serves in; named after
// the process so that dhcptest.Sweep removes it if a run is killed.
var machineNetns = fmt.Sprintf("cvdh%d-machines", os.Getpid())

// imageStore is the suite's image store (network boot serves it; the tests
// put images in it); stateDir holds the QemuMachines' VMs.
var imageStore, stateDir string

// The suite runs the IPAM controllers and the agent, with a machine network
// namespace when root (the agent makes it), and the Machine and QemuMachine
// controllers for the network boot test.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if imageStore, err = os.MkdirTemp("", "cvdhimg"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(imageStore)
	if stateDir, err = os.MkdirTemp("", "cvdhvm"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(stateDir)
	// Deferred, so run last to first: VMs quit, then the namespace goes.
	defer exec.Command("ip", "netns", "del", machineNetns).Run() // absent without root
	defer (&qemu.Host{StateDir: stateDir}).StopAll()             // best effort: tests remove their VMs
	return testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"ippool", "dhcp-agent", "machine", "qemumachine"}
		o.Machines.ImageDir = imageStore
		o.Machines.StateDir = stateDir
		o.Machines.PowerDownGrace = 500 * time.Millisecond
		if netns.IsRoot() {
			o.Machines.Netns = machineNetns
		}
	}}, &env)
}
