package qemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/converge-dev/converge/internal/netns"
)

// Boot devices.
const (
	BootDisk    = "Disk"
	BootNetwork = "Network"
	BootCDROM   = "CDROM"
)

// KernelCmdline is the kernel command line of an image's kernel, booted
// directly by QEMU (-append) or over the network (the iPXE script the DHCP
// agent serves): the console on the first serial port, which QEMU writes to
// the console log, and a reboot rather than a hang on panic.
const KernelCmdline = "console=ttyS0 quiet panic=-1"

// NIC is one network interface of a VM.
type NIC struct {
	Name, Network, MAC string
}

// Spec is what a VM is started with.
type Spec struct {
	// ID identifies the VM across restarts (namespace/name).
	ID string
	// Image is the image directory's name in the store.
	Image string
	// Boot is the device this start boots from.
	Boot      string
	CPUs      int
	MemoryMiB int
	NICs      []NIC
}

// Host runs VMs: one state directory per VM under StateDir (pidfile, QMP
// socket, console log), images from ImageDir, NICs as taps on bridges in
// the network namespace Netns (user-mode networking when Netns is empty).
type Host struct {
	// StateDir holds the VMs' state; it outlives the manager.
	StateDir string
	// ImageDir is the image store: one directory per image holding
	// vmlinuz and initrd.gz, or disk.img.
	ImageDir string
	// Netns is the network namespace for bridges and taps ("" for QEMU
	// user-mode networking: the guest gets 10.0.2.15 from QEMU itself and
	// nothing else can reach it).
	Netns string
	// Binary is qemu-system-x86_64's path; looked up when empty.
	Binary string
	// QMPTimeout bounds one QMP exchange; 5 s when zero.
	QMPTimeout time.Duration
	// Accel is QEMU's accelerator: "kvm", "tcg", or "" (AccelAuto) for KVM
	// only where it can work (see KVMUsable), else TCG.
	Accel string
}

// Accelerators Host.Accel accepts.
const (
	AccelAuto = ""
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// KVMUsable says whether KVM can run guests here: /dev/kvm opens for
// reading and writing and the CPU advertises hardware virtualisation (vmx
// or svm). The device alone is not enough: some sandboxes expose /dev/kvm
// without nested virtualisation, and a KVM guest there hangs in the
// firmware without a word (seen on the project's CI machines).
func KVMUsable() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, flags, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != "flags" {
			continue
		}
		for _, fl := range strings.Fields(flags) {
			if fl == "vmx" || fl == "svm" {
				return true
			}
		}
	}
	return false
}

// accel resolves Accel.
func (h *Host) accel() (string, error) {
	switch h.Accel {
	case AccelAuto:
		if KVMUsable() {
			return AccelKVM, nil
		}
		return AccelTCG, nil
	case AccelKVM, AccelTCG:
		return h.Accel, nil
	default:
		return "", &StartError{Msg: fmt.Sprintf("unknown QEMU accelerator %q (kvm, tcg, or empty for automatic)", h.Accel)}
	}
}

// ImageError says spec.image names nothing usable in the store.
type ImageError struct{ Msg string }

func (e *ImageError) Error() string { return e.Msg }

// StartError says QEMU did not start; Msg holds its output.
type StartError struct{ Msg string }

func (e *StartError) Error() string { return e.Msg }

// NetworkError says a bridge or tap could not be made.
type NetworkError struct{ Msg string }

func (e *NetworkError) Error() string { return e.Msg }

var imageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// dir is the VM's state directory: a short hash, so that the QMP socket's
// path stays under the 108 bytes a unix socket allows.
func (h *Host) dir(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(h.StateDir, hex.EncodeToString(sum[:8]))
}

// ConsoleLog is the VM's serial console file.
func (h *Host) ConsoleLog(id string) string { return filepath.Join(h.dir(id), "console.log") }

func (h *Host) pidfile(id string) string { return filepath.Join(h.dir(id), "qemu.pid") }
func (h *Host) socket(id string) string  { return filepath.Join(h.dir(id), "qmp.sock") }

func (h *Host) timeout() time.Duration {
	if h.QMPTimeout > 0 {
		return h.QMPTimeout
	}
	return 5 * time.Second
}

// resolveImage finds the image's files, refusing names that could leave the
// store (a path, "..", a symlink out of it).
func (h *Host) resolveImage(name string) (kernel, initrd, disk string, err error) {
	store, dir, err := imageDir(h.ImageDir, name)
	if err != nil {
		return "", "", "", err
	}
	kernel, initrd, disk = inStore(store, dir, KernelFile), inStore(store, dir, InitrdFile), inStore(store, dir, DiskFile)
	if disk == "" && (kernel == "" || initrd == "") {
		return "", "", "", &ImageError{Msg: fmt.Sprintf("image %q has neither %s nor %s and %s", name, DiskFile, KernelFile, InitrdFile)}
	}
	return kernel, initrd, disk, nil
}

// ImageFile is the path of file (KernelFile, InitrdFile or DiskFile) of
// image name in the image store imageStore, with the checks QemuMachine
// makes before it boots an image: a valid name, no path or "..", no
// symlink out of the store, a regular file. Anything else is an
// *ImageError. The network boot server serves files through it.
func ImageFile(imageStore, name, file string) (string, error) {
	if file != KernelFile && file != InitrdFile && file != DiskFile {
		return "", &ImageError{Msg: fmt.Sprintf("%q is not an image file (%s, %s or %s)", file, KernelFile, InitrdFile, DiskFile)}
	}
	store, dir, err := imageDir(imageStore, name)
	if err != nil {
		return "", err
	}
	p := inStore(store, dir, file)
	if p == "" {
		return "", &ImageError{Msg: fmt.Sprintf("image %q has no %s", name, file)}
	}
	return p, nil
}

// ValidImageName says whether name can name an image of the store (the
// store may still lack it).
func ValidImageName(name string) bool {
	return imageNameRE.MatchString(name) && !strings.Contains(name, "..")
}

// imageDir resolves the image's directory (symlinks evaluated) and the
// store's, refusing names that could leave the store.
func imageDir(imageStore, name string) (store, dir string, err error) {
	if !ValidImageName(name) {
		return "", "", &ImageError{Msg: fmt.Sprintf("image %q is not a valid image name", name)}
	}
	store, err = filepath.EvalSymlinks(imageStore)
	if err != nil {
		return "", "", &ImageError{Msg: fmt.Sprintf("the image store %s: %v", imageStore, err)}
	}
	dir, err = filepath.EvalSymlinks(filepath.Join(store, name))
	if err != nil {
		return "", "", &ImageError{Msg: fmt.Sprintf("image %q is not in the image store", name)}
	}
	if rel, err := filepath.Rel(store, dir); err != nil || rel == ".." || strings.HasPrefix(rel, "../") || rel == "." {
		return "", "", &ImageError{Msg: fmt.Sprintf("image %q resolves outside the image store", name)}
	}
	return store, dir, nil
}

// inStore is dir/f with symlinks evaluated, or "" when that is not a
// regular file inside store.
func inStore(store, dir, f string) string {
	p, err := filepath.EvalSymlinks(filepath.Join(dir, f))
	if err != nil || !strings.HasPrefix(p, store+string(filepath.Separator)) || !fileExists(p) {
		return ""
	}
	return p
}

// PID returns the running QEMU's pid for id, or 0. The pidfile is QEMU's
// own (it holds a lock on it while it runs); the pid is trusted only if
// that process's command line carries this VM's name, so a reused pid is
// never mistaken for the VM.
func (h *Host) PID(id string) int {
	b, err := os.ReadFile(h.pidfile(id))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !bytes.Contains(cmdline, []byte("guest="+vmName(id)+"\x00")) {
		return 0
	}
	return pid
}

func vmName(id string) string { return "converge-" + strings.ReplaceAll(id, "/", ".") }

// Running reports whether the VM's QEMU runs and its guest is running (QMP
// query-status).
func (h *Host) Running(id string) (bool, error) {
	if h.PID(id) == 0 {
		return false, nil
	}
	out, err := qmp(h.socket(id), h.timeout(), "query-status")
	if err != nil {
		return false, err
	}
	var st struct {
		Running bool `json:"running"`
	}
	if err := json.Unmarshal(out[0], &st); err != nil {
		return false, err
	}
	return st.Running, nil
}

// Start starts the VM's QEMU daemonized, unless it already runs (then it
// is left alone: a restarted manager re-attaches, never reboots).
func (h *Host) Start(ctx context.Context, s Spec) (int, error) {
	if pid := h.PID(s.ID); pid != 0 {
		return pid, nil
	}
	kernel, initrd, disk, err := h.resolveImage(s.Image)
	if err != nil {
		return 0, err
	}
	dir := h.dir(s.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	_ = os.Remove(h.socket(s.ID))
	netArgs, err := h.nics(ctx, s)
	if err != nil {
		return 0, err
	}
	bin := h.Binary
	if bin == "" {
		if bin, err = exec.LookPath("qemu-system-x86_64"); err != nil {
			return 0, &StartError{Msg: "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)"}
		}
	}
	accel, err := h.accel()
	if err != nil {
		return 0, err
	}
	cpus, mem := max(s.CPUs, 1), s.MemoryMiB
	if mem == 0 {
		mem = 256
	}
	args := []string{
		"-name", "guest=" + vmName(s.ID),
		"-machine", "pc,accel=" + accel + ",graphics=off",
		"-m", strconv.Itoa(mem), "-smp", strconv.Itoa(cpus),
		"-display", "none", "-vga", "none", "-monitor", "none",
		"-serial", "file:" + h.ConsoleLog(s.ID),
		"-qmp", "unix:" + h.socket(s.ID) + ",server=on,wait=off",
		"-pidfile", h.pidfile(s.ID),
		"-daemonize",
	}
	switch {
	case s.Boot == BootNetwork:
		args = append(args, "-boot", "order=n")
	case disk != "":
		args = append(args, "-drive", "file="+disk+",if=virtio,format=raw,snapshot=on", "-boot", "order=c")
	default:
		args = append(args, "-kernel", kernel, "-initrd", initrd, "-append", KernelCmdline)
	}
	args = append(args, netArgs...)
	cmd := netns.Command(ctx, h.Netns, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The daemon must not die with the manager: its own session.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		return 0, &StartError{Msg: fmt.Sprintf("qemu did not start: %v: %s", err, strings.TrimSpace(out.String()))}
	}
	pid := h.PID(s.ID)
	if pid == 0 {
		return 0, &StartError{Msg: "qemu started but its pidfile names no running QEMU: " + strings.TrimSpace(out.String())}
	}
	return pid, nil
}

// Reset resets the guest (QMP system_reset).
func (h *Host) Reset(id string) error {
	_, err := qmp(h.socket(id), h.timeout(), "system_reset")
	return err
}

// Pause stops the guest's CPUs and leaves QEMU running (QMP stop): Running
// then reports false, as for a guest that halted without powering off.
func (h *Host) Pause(id string) error {
	_, err := qmp(h.socket(id), h.timeout(), "stop")
	return err
}

// Resume runs a paused guest again (QMP cont).
func (h *Host) Resume(id string) error {
	_, err := qmp(h.socket(id), h.timeout(), "cont")
	return err
}

// Stop asks the guest to power down (ACPI, QMP system_powerdown) and waits
// up to grace for QEMU to exit, then tells QEMU to quit. A VM that does not
// run is not an error.
func (h *Host) Stop(ctx context.Context, id string, grace time.Duration) error {
	pid := h.PID(id)
	if pid == 0 {
		return nil
	}
	if grace > 0 {
		if _, err := qmp(h.socket(id), h.timeout(), "system_powerdown"); err == nil {
			deadline := time.Now().Add(grace)
			for time.Now().Before(deadline) && h.PID(id) != 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
	if h.PID(id) == 0 {
		return nil
	}
	if _, err := qmp(h.socket(id), h.timeout(), "quit"); err != nil && h.PID(id) != 0 {
		return fmt.Errorf("quitting QEMU %d: %w", pid, err)
	}
	for range 100 {
		if h.PID(id) == 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("QEMU %d did not exit after quit", pid)
}

// Remove stops the VM and removes its taps and state directory.
func (h *Host) Remove(ctx context.Context, id string, nics []NIC) error {
	if err := h.Stop(ctx, id, 0); err != nil {
		return err
	}
	if h.Netns != "" {
		for _, n := range nics {
			_ = ipCmd(ctx, "-n", h.Netns, "link", "del", tapName(id, n.Name))
		}
	}
	return os.RemoveAll(h.dir(id))
}

// IDs lists the VMs with a state directory and a running QEMU, by pid.
func (h *Host) runningPIDs() []int {
	entries, _ := os.ReadDir(h.StateDir)
	var out []int
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(h.StateDir, e.Name(), "qemu.pid"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			if bytes.Contains(cmdline, []byte("guest=converge-")) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// StopAll quits every VM of this host (used by `converge up` on exit, so
// that no VM outlives it): QMP quit, else SIGTERM.
func (h *Host) StopAll() error {
	var errs []error
	entries, _ := os.ReadDir(h.StateDir)
	for _, e := range entries {
		sock := filepath.Join(h.StateDir, e.Name(), "qmp.sock")
		if _, err := qmp(sock, h.timeout(), "quit"); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, pid := range h.runningPIDs() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	return errors.Join(errs...)
}

// tapName is the NIC's tap: "cvt" and a hash, within IFNAMSIZ.
func tapName(id, nic string) string {
	sum := sha256.Sum256([]byte(id + "/" + nic))
	return "cvt" + hex.EncodeToString(sum[:5])
}

// BridgeName is the bridge of a network.
func BridgeName(network string) string { return "cvb-" + network }

// nics makes the taps (and bridges) and returns QEMU's NIC arguments.
func (h *Host) nics(ctx context.Context, s Spec) ([]string, error) {
	var args []string
	for i, n := range s.NICs {
		id := fmt.Sprintf("n%d", i)
		dev := "virtio-net-pci,netdev=" + id + ",mac=" + n.MAC
		if s.Boot == BootNetwork && i == 0 {
			dev += ",bootindex=1"
		}
		if h.Netns == "" {
			args = append(args, "-netdev", "user,id="+id, "-device", dev)
			continue
		}
		tap := tapName(s.ID, n.Name)
		if err := h.ensureTap(ctx, tap, BridgeName(n.Network)); err != nil {
			return nil, err
		}
		args = append(args, "-netdev", "tap,id="+id+",ifname="+tap+",script=no,downscript=no", "-device", dev)
	}
	return args, nil
}

// ensureTap makes the namespace, the bridge and the tap if missing.
func (h *Host) ensureTap(ctx context.Context, tap, bridge string) error {
	if !netns.IsRoot() {
		return &NetworkError{Msg: ErrNotRoot.Error() + fmt.Sprintf(" (network namespace %s); run as root, or leave the network namespace unset for QEMU user-mode networking", h.Netns)}
	}
	if err := ipCmd(ctx, "netns", "list"); err != nil {
		return &NetworkError{Msg: err.Error()}
	}
	if !fileExists(filepath.Join(netns.Dir, h.Netns)) {
		if err := ipCmd(ctx, "netns", "add", h.Netns); err != nil {
			return &NetworkError{Msg: err.Error()}
		}
	}
	if ipCmd(ctx, "-n", h.Netns, "link", "show", bridge) != nil {
		if err := ipCmd(ctx, "-n", h.Netns, "link", "add", bridge, "type", "bridge"); err != nil {
			return &NetworkError{Msg: err.Error()}
		}
	}
	if err := ipCmd(ctx, "-n", h.Netns, "link", "set", bridge, "up"); err != nil {
		return &NetworkError{Msg: err.Error()}
	}
	if ipCmd(ctx, "-n", h.Netns, "link", "show", tap) != nil {
		if err := ipCmd(ctx, "-n", h.Netns, "tuntap", "add", "dev", tap, "mode", "tap"); err != nil {
			return &NetworkError{Msg: err.Error()}
		}
	}
	for _, a := range [][]string{{"link", "set", tap, "master", bridge}, {"link", "set", tap, "up"}} {
		if err := ipCmd(ctx, append([]string{"-n", h.Netns}, a...)...); err != nil {
			return &NetworkError{Msg: err.Error()}
		}
	}
	return nil
}

func ipCmd(ctx context.Context, args ...string) error {
	return run(ctx, "", "ip", args...)
}
