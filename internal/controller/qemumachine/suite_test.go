package qemumachine_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	env                *testenv.Environment
	imageDir, stateDir string
)

// The suite runs the Machine and QemuMachine controllers with real QEMU
// VMs (TCG). The test image is built at test time into a cache outside the
// repository; VMs are removed by each test, and any left are quit at the
// end.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	imageDir, err = qemu.TestImageDir()
	if err == nil {
		err = qemu.BuildBusyboxImage(context.Background(), imageDir, "busybox")
	}
	if err == nil {
		_, err = exec.LookPath("qemu-system-x86_64")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "qemumachine tests: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING QemuMachine tests: %v ***\n\n", err)
		return 0
	}
	stateDir, err = os.MkdirTemp("", "cvqm")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(stateDir)
	defer (&qemu.Host{StateDir: stateDir}).StopAll()
	return testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"machine", "qemumachine"}
		o.Machines = machineOptions(stateDir)
	}}, &env)
}

func machineOptions(state string) machineoptions.Machines {
	return machineoptions.Machines{StateDir: state, ImageDir: imageDir, PowerDownGrace: 500 * time.Millisecond}
}
