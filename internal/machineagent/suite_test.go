package machineagent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	env      *testenv.Environment
	imageDir string
)

// The suite runs `converge run --qemu-machines=agent` and `converge agent
// machines` as real processes against a real API server, with real QEMU
// VMs (TCG) of the busybox test image (built at test time into a cache
// outside the repository). The in-process manager runs no controller.
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
			fmt.Fprintf(os.Stderr, "machine agent tests: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING machine agent tests: %v ***\n\n", err)
		return 0
	}
	return testenv.Main(m, testenv.Options{NoManager: true}, &env)
}
