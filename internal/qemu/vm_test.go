package qemu_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/testenv"
)

func console(h *qemu.Host, id string) string {
	b, _ := os.ReadFile(h.ConsoleLog(id))
	return string(b)
}

func waitConsole(t *testing.T, h *qemu.Host, id, want string, count int) {
	t.Helper()
	NewWithT(t).Eventually(func() int { return strings.Count(console(h, id), want) }).
		WithTimeout(120*time.Second).WithPolling(200*time.Millisecond).Should(BeNumerically(">=", count), "console of %s shows %q %d time(s)", id, want, count)
}

// lastUptime is the last uptime the guest printed.
func lastUptime(h *qemu.Host, id string) string {
	lines := strings.Split(console(h, id), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), qemu.UptimeMarker); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// exited: no such process, or a zombie nobody reaped yet (QEMU daemonizes,
// so its parent is PID 1, which in a container may not reap).
func exited(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}

func newHost(t *testing.T, netns string) *qemu.Host {
	state, err := os.MkdirTemp("", "cvq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	return &qemu.Host{StateDir: state, ImageDir: imageDir, Netns: netns}
}

func stopOnCleanup(t *testing.T, h *qemu.Host, id string, nics []qemu.NIC) {
	t.Cleanup(func() {
		if err := h.Remove(t.Context(), id, nics); err != nil {
			t.Errorf("removing VM %s: %v", id, err)
		}
	})
}

// A VM boots and its console shows init; a second Host on the same state
// (a restarted manager) re-attaches to the same QEMU without booting it
// again; reset reboots it; Stop ends the process cleanly.
func TestBootReattachResetStop(t *testing.T) {
	need(t)
	t.Parallel()
	g := NewWithT(t)
	h := newHost(t, "")
	const id = "ns/boot"
	nics := []qemu.NIC{{Name: "eth0", Network: "lan", MAC: "02:00:00:00:01:01"}}
	stopOnCleanup(t, h, id, nics)
	pid, err := h.Start(t.Context(), qemu.Spec{ID: id, Image: "busybox", Boot: qemu.BootDisk, NICs: nics})
	g.Expect(err).NotTo(HaveOccurred())
	waitConsole(t, h, id, qemu.InitMarker, 1)
	waitConsole(t, h, id, qemu.UptimeMarker, 2)
	running, err := h.Running(id)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(running).To(BeTrue())

	// The manager restarts: a new Host value, same directories.
	h2 := &qemu.Host{StateDir: h.StateDir, ImageDir: h.ImageDir}
	before := lastUptime(h, id)
	pid2, err := h2.Start(t.Context(), qemu.Spec{ID: id, Image: "busybox", Boot: qemu.BootDisk, NICs: nics})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pid2).To(Equal(pid), "re-attached to the same QEMU")
	g.Eventually(func() string { return lastUptime(h, id) }).WithTimeout(30 * time.Second).ShouldNot(Equal(before))
	g.Expect(strings.Count(console(h, id), qemu.InitMarker)).To(Equal(1), "no second boot")

	g.Expect(h2.Reset(id)).To(Succeed())
	waitConsole(t, h, id, qemu.InitMarker, 2)
	g.Expect(h2.PID(id)).To(Equal(pid), "a reset keeps the process")

	g.Expect(h2.Stop(t.Context(), id, 500*time.Millisecond)).To(Succeed())
	g.Expect(h2.PID(id)).To(BeZero())
	g.Eventually(func() bool { return exited(pid) }).WithTimeout(10*time.Second).Should(BeTrue(), "the QEMU process has exited")
}

// Network boot goes through QEMU's iPXE ROM, which asks for DHCP.
func TestNetworkBoot(t *testing.T) {
	need(t)
	t.Parallel()
	h := newHost(t, "")
	const id = "ns/pxe"
	nics := []qemu.NIC{{Name: "eth0", Network: "lan", MAC: "02:00:00:00:01:02"}}
	stopOnCleanup(t, h, id, nics)
	_, err := h.Start(t.Context(), qemu.Spec{ID: id, Image: "busybox", Boot: qemu.BootNetwork, NICs: nics})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	waitConsole(t, h, id, "iPXE", 1)
	waitConsole(t, h, id, "Configuring (net0 02:00:00:00:01:02)", 1)
}

// Image names never leave the store: paths, "..", and symlinks out of it
// are refused before QEMU starts.
func TestImageOutsideStoreRefused(t *testing.T) {
	need(t)
	g := NewWithT(t)
	store := t.TempDir()
	outside := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(outside, qemu.DiskFile), []byte("x"), 0o600)).To(Succeed())
	g.Expect(os.Symlink(outside, filepath.Join(store, "escape"))).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(store, "partial"), 0o755)).To(Succeed())
	g.Expect(os.Symlink(filepath.Join(outside, qemu.DiskFile), filepath.Join(store, "partial", qemu.DiskFile))).To(Succeed())
	h := &qemu.Host{StateDir: t.TempDir(), ImageDir: store}
	for _, name := range []string{"../etc", "/etc", "escape", "partial", "missing", "..", "a/b"} {
		_, err := h.Start(t.Context(), qemu.Spec{ID: "ns/" + strings.ReplaceAll(name, "/", "_"), Image: name})
		var ie *qemu.ImageError
		g.Expect(err).To(BeAssignableToTypeOf(ie), "image %q", name)
	}
}

// In a network namespace: the NIC is a tap on the network's bridge, and
// the guest's DHCP client gets a lease from a DHCP server on that bridge,
// printed on the console.
func TestDHCPLeaseOnBridge(t *testing.T) {
	need(t)
	testenv.NeedRoot(t, "QEMU bridge test", "bridges and taps")
	t.Parallel()
	g := NewWithT(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	netns := "cvtest-" + hex.EncodeToString(b)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", netns).Run() })
	h := newHost(t, netns)
	const id = "ns/dhcp"
	nics := []qemu.NIC{{Name: "eth0", Network: "lan", MAC: "02:00:00:00:01:03"}}
	stopOnCleanup(t, h, id, nics)
	g.Expect(exec.Command("ip", "netns", "add", netns).Run()).To(Succeed())
	bridge := qemu.BridgeName("lan")
	for _, args := range [][]string{
		{"link", "add", bridge, "type", "bridge"}, {"addr", "add", "10.77.0.1/24", "dev", bridge}, {"link", "set", bridge, "up"},
	} {
		out, err := exec.Command("ip", append([]string{"-n", netns}, args...)...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	}
	conf := filepath.Join(t.TempDir(), "udhcpd.conf")
	leases := filepath.Join(filepath.Dir(conf), "leases")
	g.Expect(os.WriteFile(conf, []byte("start 10.77.0.50\nend 10.77.0.60\ninterface "+bridge+"\nlease_file "+leases+
		"\noption subnet 255.255.255.0\noption router 10.77.0.1\n"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(leases, nil, 0o600)).To(Succeed())
	dhcpd := exec.Command("ip", "netns", "exec", netns, "busybox", "udhcpd", "-f", conf)
	g.Expect(dhcpd.Start()).To(Succeed())
	t.Cleanup(func() { _ = dhcpd.Process.Kill(); _ = dhcpd.Wait() })

	_, err := h.Start(t.Context(), qemu.Spec{ID: id, Image: "busybox", Boot: qemu.BootDisk, NICs: nics})
	g.Expect(err).NotTo(HaveOccurred())
	waitConsole(t, h, id, qemu.LeaseMarker+" eth0 10.77.0.5", 1)
}

// An accelerator QEMU would not know is refused before anything starts.
func TestUnknownAccelRefused(t *testing.T) {
	need(t)
	g := NewWithT(t)
	h := newHost(t, "")
	h.Accel = "hvf"
	_, err := h.Start(t.Context(), qemu.Spec{ID: "ns/accel", Image: "busybox", Boot: qemu.BootDisk})
	var se *qemu.StartError
	g.Expect(errors.As(err, &se)).To(BeTrue(), "a StartError, got %v", err)
	g.Expect(se.Msg).To(ContainSubstring(`unknown QEMU accelerator "hvf"`))
	g.Expect(h.PID("ns/accel")).To(BeZero())
}
