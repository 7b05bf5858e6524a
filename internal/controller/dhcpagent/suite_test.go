package dhcpagent_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// machineNetns is the namespace the suite's agent serves in; named after
// the process so that dhcptest.Sweep removes it if a run is killed.
var machineNetns = fmt.Sprintf("cvdh%d-machines", os.Getpid())

// The suite runs the IPAM controllers and the agent, with a machine network
// namespace when root (the agent makes it).
func TestMain(m *testing.M) {
	code := testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"ippool", "dhcp-agent"}
		if netns.IsRoot() {
			o.Machines.Netns = machineNetns
		}
	}}, &env)
	_ = exec.Command("ip", "netns", "del", machineNetns).Run()
	os.Exit(code)
}
