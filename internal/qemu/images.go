package qemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// KernelPackage is the Debian metapackage whose dependency holds the kernel
// the test image boots.
const KernelPackage = "linux-image-cloud-amd64"

// virtioModules are the cloud kernel's modular virtio drivers, in the order
// they must be loaded (each needs the symbols of the ones before).
var virtioModules = []string{"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "failover", "net_failover", "virtio_net"}

// Image file names inside an image directory of the store.
const (
	KernelFile = "vmlinuz"
	InitrdFile = "initrd.gz"
	DiskFile   = "disk.img"
)

// Console markers the busybox image's init prints.
const (
	// InitMarker is printed once init runs.
	InitMarker = "converge-init: started"
	// LeaseMarker prefixes each DHCP lease: "converge-lease: eth0 10.0.0.5/24".
	LeaseMarker = "converge-lease:"
	// UptimeMarker prefixes the uptime printed every second.
	UptimeMarker = "converge-uptime:"
)

// initScript is the busybox image's /init: load virtio, bring up every NIC
// with a DHCP client that prints its lease, then print the uptime each
// second (so that a test can see a machine was not rebooted).
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /tmp /run
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
for m in $(cat /etc/modules); do insmod /lib/modules/$m.ko 2>/dev/null; done
echo "` + InitMarker + `"
for n in /sys/class/net/eth*; do
  [ -e "$n" ] || continue
  i=${n##*/}
  ip link set "$i" up
  udhcpc -i "$i" -s /etc/udhcpc.script -t 20 -T 1 -A 1 -b -q >/dev/null 2>&1 &
done
while true; do
  echo "` + UptimeMarker + ` $(cut -d' ' -f1 /proc/uptime)"
  sleep 1
done
`

const udhcpcScript = `#!/bin/sh
case "$1" in
bound|renew)
  ip addr flush dev "$interface"
  ip addr add "$ip/$mask" dev "$interface"
  [ -n "$router" ] && ip route add default via ${router%% *} dev "$interface"
  echo "` + LeaseMarker + ` $interface $ip/$mask" > /dev/console
  ;;
esac
exit 0
`

// BuildBusyboxImage builds the test image into dir/name: the Debian cloud
// kernel (fetched with apt-get download, unpacked with dpkg-deb, never
// installed) and an initramfs made from busybox-static and the kernel's
// virtio modules. It needs apt-get, dpkg-deb, cpio, gzip and busybox. An
// image already built from the same init scripts is kept; one built from
// other scripts is rebuilt. Builds of one image are serialised by a lock
// file beside it, so that test suites running in parallel on a cold cache
// never remove each other's image.
func BuildBusyboxImage(ctx context.Context, dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("image store %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "."+name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("locking image %s: %w", name, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking image %s: %w", name, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file releases it too
	out := filepath.Join(dir, name)
	stamp := imageStamp()
	if fileExists(filepath.Join(out, KernelFile)) && fileExists(filepath.Join(out, InitrdFile)) {
		if b, err := os.ReadFile(filepath.Join(out, stampFile)); err == nil && string(b) == stamp {
			return nil
		}
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb", "cpio", "gzip", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("building image %s needs %s: %w", name, tool, err)
		}
	}
	work, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	pkg, err := kernelPackage(ctx)
	if err != nil {
		return err
	}
	if err := run(ctx, work, "apt-get", "download", "-qq", pkg); err != nil {
		return fmt.Errorf("downloading %s (are the apt lists there? run apt-get update): %w", pkg, err)
	}
	debs, _ := filepath.Glob(filepath.Join(work, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	root := filepath.Join(work, "root")
	if err := run(ctx, work, "dpkg-deb", "-x", debs[0], root); err != nil {
		return err
	}
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return fmt.Errorf("%s holds %d kernels", pkg, len(kernels))
	}
	initrd := filepath.Join(work, "initrd")
	for _, d := range []string{"bin", "lib/modules", "etc"} {
		if err := os.MkdirAll(filepath.Join(initrd, d), 0o755); err != nil {
			return err
		}
	}
	mods, err := findModules(filepath.Join(root, "lib", "modules"))
	if err != nil {
		return err
	}
	var loaded []string
	for _, m := range virtioModules {
		src, ok := mods[m]
		if !ok {
			continue // built in
		}
		if err := copyFile(src, filepath.Join(initrd, "lib", "modules", m+".ko"), 0o644); err != nil {
			return err
		}
		loaded = append(loaded, m)
	}
	bb, _ := exec.LookPath("busybox")
	files := map[string]struct {
		data string
		mode fs.FileMode
	}{
		"init":              {initScript, 0o755},
		"etc/udhcpc.script": {udhcpcScript, 0o755},
		"etc/modules":       {strings.Join(loaded, "\n") + "\n", 0o644},
	}
	for p, f := range files {
		if err := os.WriteFile(filepath.Join(initrd, p), []byte(f.data), f.mode); err != nil {
			return err
		}
	}
	if err := copyFile(bb, filepath.Join(initrd, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("busybox", filepath.Join(initrd, "bin", "sh")); err != nil {
		return err
	}
	staging := filepath.Join(work, "out")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", "find . | cpio -o -H newc --quiet | gzip -1 > "+shellQuote(filepath.Join(staging, InitrdFile)))
	cmd.Dir = initrd
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("packing the initramfs: %w: %s", err, b)
	}
	if st, err := os.Stat(filepath.Join(staging, InitrdFile)); err != nil || st.Size() < 100<<10 {
		return fmt.Errorf("the initramfs came out empty or small (is cpio installed?): %w", err)
	}
	if err := copyFile(kernels[0], filepath.Join(staging, KernelFile), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(staging, stampFile), []byte(stamp), 0o644); err != nil {
		return err
	}
	_ = os.RemoveAll(out)
	return os.Rename(staging, out)
}

// stampFile records which init scripts an image was built from.
const stampFile = ".stamp"

// imageStamp identifies the image's content other than the kernel: a
// change to the init scripts or the module list rebuilds cached images.
func imageStamp() string {
	h := sha256.Sum256([]byte(initScript + "\x00" + udhcpcScript + "\x00" + strings.Join(virtioModules, ",")))
	return hex.EncodeToString(h[:])
}

var dependsRE = regexp.MustCompile(`(?m)^\s*Depends:\s*(linux-image-\S+)`)

func kernelPackage(ctx context.Context) (string, error) {
	b, err := exec.CommandContext(ctx, "apt-cache", "depends", KernelPackage).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w", KernelPackage, err)
	}
	m := dependsRE.FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("apt-cache does not know %s (run apt-get update)", KernelPackage)
	}
	return string(m[1]), nil
}

func findModules(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			out[strings.TrimSuffix(filepath.Base(p), ".ko")] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finding the kernel's modules: %w", err)
	}
	return out, nil
}

func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(buf.String()))
	}
	return nil
}

func copyFile(src, dst string, mode fs.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode) //nolint:gosec // dst is a file of the image being built in the image store, named by this package
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ErrNotRoot is returned when bridges and taps are needed without root.
var ErrNotRoot = errors.New("bridges and taps need root or CAP_NET_ADMIN")
