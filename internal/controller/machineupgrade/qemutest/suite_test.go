package qemutest

import (
	"fmt"
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/qemu/netboottest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	env *testenv.Environment
	// nb is the image store, VM state directory and machine network
	// namespace (made by the DHCP agent) of the suite.
	nb *netboottest.Suite
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	if nb, err = netboottest.New("mup"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nb.Close() // after the control plane: VMs quit, then the namespace goes
	return testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"ippool", "dhcp-agent", "machine", "qemumachine", "machinebmc", "machineupgrade"}
		nb.Machines(&o.Machines)
	}}, &env)
}
