package qemu_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/converge-dev/converge/internal/qemu"
)

// imageDir holds the test image, built once into a cache outside the
// repository (never committed).
var imageDir, skipReason string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := qemu.TestImageDir()
	if err == nil {
		err = qemu.BuildBusyboxImage(context.Background(), dir, "busybox")
	}
	if err == nil {
		_, err = exec.LookPath("qemu-system-x86_64")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "qemu tests: %v (CI must have qemu-system-x86, busybox-static, cpio and the apt lists)\n", err)
			return 1
		}
		skipReason = "QEMU or the test image is not available: " + err.Error()
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING QEMU tests: %s ***\n\n", skipReason)
	}
	imageDir = dir
	return m.Run()
}

func need(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
