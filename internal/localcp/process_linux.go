package localcp

import (
	"os/exec"
	"runtime"
	"syscall"
)

// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not
// the process. Go may retire threads, so every child is started from one
// goroutine locked to its thread for the life of the process.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for req := range spawnRequests {
			req.done <- req.cmd.Start()
		}
	}()
}

func startBound(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL,
		// Own process group: a terminal's Ctrl-C reaches only converge, which
		// then stops the components in order.
		Setpgid: true,
	}
	req := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawnRequests <- req
	return <-req.done
}
