// Package netboottest holds what the control-plane test suites that
// network-boot real QemuMachines share: a throwaway image store with the
// test images (busybox, and busybox-v2 made from it with
// qemu.BuildMarkedImage), a state directory for the VMs, the name of the
// network namespace the DHCP agent and the QemuMachine NICs share (made by
// the agent; named after the process, so that dhcptest.Sweep removes it
// when a run is killed), and the manager options wiring them. Close
// removes all of it, also after a failed run.
package netboottest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/qemu"
)

// Images the suites boot: the base test image, and one made from it that
// prints qemu.ImageMarker + " " + ImageB on its console.
const (
	ImageA = "busybox"
	ImageB = "busybox-v2"
)

// Suite is one test process's store, state directory and namespace.
type Suite struct {
	// ImageStore is the store network boot serves (the tests put images
	// in it).
	ImageStore string
	// StateDir holds the QemuMachines' VMs.
	StateDir string
	// Netns is the machine network namespace ("" when the process is not
	// root: the tests that need it skip).
	Netns string
}

// New makes the store and the state directory; the namespace is named
// cvdh<pid>-<tag> (made by the DHCP agent when the suite's first pool is
// served). Close it, also on failure.
func New(tag string) (*Suite, error) {
	s := &Suite{}
	var err error
	if s.ImageStore, err = os.MkdirTemp("", "cvnbimg"); err != nil {
		return nil, err
	}
	if s.StateDir, err = os.MkdirTemp("", "cvnbvm"); err != nil {
		s.Close()
		return nil, err
	}
	if netns.IsRoot() {
		s.Netns = fmt.Sprintf("cvdh%d-%s", os.Getpid(), tag)
	}
	return s, nil
}

// Machines sets the manager's machine options (setup.Options.Machines):
// the store, the state directory, the namespace, and a short power-down
// grace.
func (s *Suite) Machines(m *machineoptions.Machines) {
	m.ImageDir = s.ImageStore
	m.StateDir = s.StateDir
	m.PowerDownGrace = 500 * time.Millisecond
	m.Netns = s.Netns
}

// Host is a qemu.Host over the suite's VMs (to read consoles and, in
// cleanups, remove a VM and its taps).
func (s *Suite) Host() *qemu.Host {
	return &qemu.Host{StateDir: s.StateDir, ImageDir: s.ImageStore, Netns: s.Netns}
}

// Close quits every VM the suite's state directory holds, deletes the
// namespace (with its bridges and taps) and removes the directories. Call
// it after the control plane stopped.
func (s *Suite) Close() {
	if s.StateDir != "" {
		_ = (&qemu.Host{StateDir: s.StateDir}).StopAll() // best effort: tests remove their VMs
	}
	if s.Netns != "" {
		_ = exec.Command("ip", "netns", "del", s.Netns).Run() //nolint:noctx // cleanup after the run's context is gone
	}
	for _, d := range []string{s.StateDir, s.ImageStore} {
		if d != "" {
			_ = os.RemoveAll(d)
		}
	}
}

// UpgradeImages puts ImageA (built once into the user's image cache, see
// qemu.TestImageDir) and ImageB (ImageA printing its marker) into the
// store. It needs what qemu.BuildBusyboxImage and qemu.BuildMarkedImage
// need; the error says what is missing.
func (s *Suite) UpgradeImages(ctx context.Context) error {
	cache, err := qemu.TestImageDir()
	if err == nil {
		err = qemu.BuildBusyboxImage(ctx, cache, ImageA)
	}
	if err == nil {
		err = LinkImage(cache, s.ImageStore, ImageA)
	}
	if err == nil {
		err = qemu.BuildMarkedImage(ctx, s.ImageStore, ImageA, ImageB)
	}
	return err
}

// LinkImage puts the files of image name of the store from into the store
// to (hard links when they share a file system, else copies).
func LinkImage(from, to, name string) error {
	if err := os.MkdirAll(filepath.Join(to, name), 0o755); err != nil {
		return err
	}
	for _, f := range []string{qemu.KernelFile, qemu.InitrdFile} {
		src, dst := filepath.Join(from, name, f), filepath.Join(to, name, f)
		_ = os.Remove(dst)
		if os.Link(src, dst) == nil {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil { //nolint:gosec // served to VMs
			return err
		}
	}
	return nil
}
