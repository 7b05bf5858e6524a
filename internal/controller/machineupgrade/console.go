package machineupgrade

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

// MaxConsoleBytes bounds how much of a console file LocalConsole reads.
const MaxConsoleBytes = 32 << 20

// ConsoleReader reads the serial console a Machine's provider keeps (the
// file at the Machine's status.consoleLog, on the host that runs the
// machine). The console post-checks read it through this interface; the
// default, LocalConsole, reads files of this host only.
type ConsoleReader interface {
	// ReadConsole returns the whole console of m. It returns an error
	// wrapping ErrNoConsole when m's provider keeps none, and one wrapping
	// ErrConsoleElsewhere when the console is not readable here.
	ReadConsole(ctx context.Context, m *machinev1alpha1.Machine) ([]byte, error)
}

var (
	// ErrNoConsole says the Machine's provider keeps no serial console (its
	// status.consoleLog is empty, as for a KwokMachine).
	ErrNoConsole = errors.New("its provider keeps no serial console (status.consoleLog is empty)")
	// ErrConsoleElsewhere says the console file is not on this host (the
	// machine runs on another host, under a per-node agent).
	ErrConsoleElsewhere = errors.New("its console file is not on the manager's host")
)

// LocalConsole reads consoles from this host's file system.
type LocalConsole struct{}

// ReadConsole reads the file at m's status.consoleLog.
func (LocalConsole) ReadConsole(_ context.Context, m *machinev1alpha1.Machine) ([]byte, error) {
	path := m.Status.ConsoleLog
	if path == "" {
		return nil, fmt.Errorf("machine %s: %w", m.Name, ErrNoConsole)
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("machine %s: %w: %s is not here (a QemuMachine under a per-node agent keeps it on its node)", m.Name, ErrConsoleElsewhere, path)
		}
		return nil, fmt.Errorf("reading the console of Machine %s: %w", m.Name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxConsoleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the console of Machine %s: %w", m.Name, err)
	}
	if len(b) > MaxConsoleBytes {
		return nil, fmt.Errorf("the console of Machine %s (%s) is larger than %d bytes", m.Name, path, MaxConsoleBytes)
	}
	return b, nil
}

// consoleMark is where a console stands: its size and the digest of its
// content so far.
func consoleMark(b []byte) (int64, string) {
	sum := sha256.Sum256(b)
	return int64(len(b)), hex.EncodeToString(sum[:])
}

// consoleSince returns the part of console b printed after the mark
// (offset, digest) was taken: from offset on when the file still starts
// with the content the mark hashed (it grew in place), else all of it (it
// was rewritten from its start since, as QEMU does at each start). Without
// a mark (offset nil) it is all of b.
func consoleSince(b []byte, offset *int64, digest string) []byte {
	if offset == nil || *offset < 0 || *offset > int64(len(b)) {
		return b
	}
	if _, d := consoleMark(b[:*offset]); digest != "" && d != digest {
		return b
	}
	return b[*offset:]
}

// lastLine is the last non-empty line of b (trimmed), or "".
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\r\n \t"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			if len(l) > 200 {
				l = l[:200] + "..."
			}
			return l
		}
	}
	return ""
}

// matchLine reports whether a line of b matches re.
func matchLine(b []byte, re *regexp.Regexp) bool {
	for _, l := range bytes.Split(b, []byte("\n")) {
		if re.Match(bytes.TrimRight(l, "\r")) {
			return true
		}
	}
	return false
}

// hasConsoleCheck reports whether u has a console post-check.
func hasConsoleCheck(u *upgradev1alpha1.MachineUpgrade) bool {
	for _, c := range u.Spec.PostChecks {
		if c.Console != "" {
			return true
		}
	}
	return false
}

// markConsole records in mp where m's console stands, before its power
// cycle is sent, when u has a console check and the console is readable
// here (else nothing: the check says why when it runs). A mark already
// recorded is kept: a reset resent after a resume counts from the first.
func (r *Reconciler) markConsole(ctx context.Context, u *upgradev1alpha1.MachineUpgrade, mp *upgradev1alpha1.MachineProgress, m *machinev1alpha1.Machine) bool {
	if !hasConsoleCheck(u) || mp.ConsoleOffset != nil {
		return false
	}
	b, err := r.Console.ReadConsole(ctx, m)
	if err != nil {
		return false
	}
	off, d := consoleMark(b)
	mp.ConsoleOffset, mp.ConsoleDigest = &off, d
	return true
}

// evalConsole evaluates the console check c against m: ok when a line
// printed since the mark in mp matches. Not matching yet is a wait (msg
// says so, with the console's last line); an unreadable console is an
// error saying why.
func (r *Reconciler) evalConsole(ctx context.Context, m *machinev1alpha1.Machine, mp *upgradev1alpha1.MachineProgress, c compiled) (bool, string, error) {
	b, err := r.Console.ReadConsole(ctx, m)
	if err != nil {
		return false, "", fmt.Errorf("console check %s cannot read the console of Machine %s: %w", c.name, m.Name, err)
	}
	var off *int64
	var digest string
	if mp != nil {
		off, digest = mp.ConsoleOffset, mp.ConsoleDigest
	}
	since := consoleSince(b, off, digest)
	if matchLine(since, c.console) {
		return true, "", nil
	}
	last := lastLine(since)
	if last == "" {
		last = "<nothing printed since the power cycle>"
	}
	return false, fmt.Sprintf("console check %s: no line matching %q on the console of Machine %s since its power cycle (last line: %q)",
		c.name, c.console.String(), m.Name, last), nil
}
