package localcp

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one supervised component.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	cmd     *exec.Cmd
	log     *os.File
	started time.Time
	exited  chan struct{} // closed when the process has exited
	err     error         // exit error, valid after exited is closed
}

func (p *process) start() error {
	if err := os.MkdirAll(filepath.Dir(p.logPath), 0o700); err != nil {
		return fmt.Errorf("creating log directory: %w", err)
	}
	// Keep the previous run's log beside the new one, for post-mortems.
	if _, err := os.Stat(p.logPath); err == nil {
		_ = os.Rename(p.logPath, p.logPath+".1")
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", p.name, err)
	}
	p.log = log
	p.cmd = exec.Command(p.path, p.args...)
	p.cmd.Stdout = log
	p.cmd.Stderr = log
	p.exited = make(chan struct{})
	p.started = time.Now()
	if err := startBound(p.cmd); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = p.log.Close()
		close(p.exited)
	}()
	return nil
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits up to grace before SIGKILL.
func (p *process) stop(grace time.Duration) error {
	if !p.running() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return fmt.Errorf("%s did not stop within %s and was killed", p.name, grace)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) could not be killed", p.name, p.cmd.Process.Pid)
	}
}

// exitError describes an unexpected exit, with the tail of the log.
func (p *process) exitError() error {
	msg := fmt.Sprintf("%s exited unexpectedly", p.name)
	if p.err != nil {
		msg += " (" + p.err.Error() + ")"
	}
	tail := errorLines(tailFile(p.logPath, 200), 8)
	if hint := diagnose(tail); hint != nil {
		hint.Err = errors.New(msg)
		return hint
	}
	return &UserError{
		Problem: fmt.Sprintf("%s; last lines of %s:\n%s", msg, p.logPath, indent(tail)),
		Fix:     "read the full log at " + p.logPath,
	}
}

// diagnose turns well-known failure messages in a component log into advice.
func diagnose(tail string) *UserError {
	switch {
	case strings.Contains(tail, "no space left on device"):
		return &UserError{Problem: "disk full", Fix: "free some disk space under the data directory and run again"}
	case strings.Contains(tail, "address already in use"):
		return &UserError{Problem: "a port is already in use:\n" + indent(lastMatching(tail, "address already in use")),
			Fix: "stop the other process (another `converge up`?) or choose other ports (--port, --etcd-port)"}
	case strings.Contains(tail, "cluster ID mismatch") || strings.Contains(tail, "unsupported storage version") ||
		strings.Contains(tail, "member count is unequal"):
		return &UserError{Problem: "the etcd data in the data directory cannot be used by this etcd",
			Fix: "remove the data directory (this deletes the local cluster) or pass another --data-dir"}
	}
	return nil
}

func lastMatching(text, substr string) string {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return lines[i]
		}
	}
	return ""
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// errorLines keeps the last n klog error/fatal lines (E..., F...) of a log
// tail, or its last n lines when it has none.
func errorLines(tail string, n int) string {
	lines := strings.Split(tail, "\n")
	var errs []string
	for _, l := range lines {
		if len(l) > 1 && (l[0] == 'E' || l[0] == 'F') && l[1] >= '0' && l[1] <= '9' ||
			strings.Contains(l, "\"level\":\"error\"") || strings.Contains(l, "\"level\":\"fatal\"") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		errs = lines
	}
	if len(errs) > n {
		errs = errs[len(errs)-n:]
	}
	return strings.Join(errs, "\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
