//go:build !linux

package localcp

import (
	"os/exec"
	"syscall"
)

// startBound starts cmd in its own process group. Outside Linux there is no
// PR_SET_PDEATHSIG, so children are only reaped on a clean stop.
func startBound(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}
