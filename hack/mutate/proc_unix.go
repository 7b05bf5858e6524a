//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// killGroup makes the command's cancellation kill its whole process group:
// go test and the test binaries it started.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
