package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// TestImageDir is where tests and `make images` keep the built test image:
// $CONVERGE_IMAGE_CACHE, else <user cache dir>/converge/images (outside
// any repository: images are never committed).
func TestImageDir() (string, error) {
	if d := os.Getenv("CONVERGE_IMAGE_CACHE"); d != "" {
		return d, os.MkdirAll(d, 0o755) //nolint:gosec // the operator chose this cache directory
	}
	c, err := os.UserCacheDir()
	if err != nil {
		c = os.TempDir()
	}
	d := filepath.Join(c, "converge", "images")
	return d, os.MkdirAll(d, 0o755)
}

// ImageMarker prefixes the line a marked image's init prints after
// InitMarker: "converge-image: NAME" (see BuildMarkedImage).
const ImageMarker = "converge-image:"

// BuildMarkedImage makes image name in store from the image base of the
// same store: the same kernel, and base's initramfs followed by a second
// archive whose /init is the busybox image's init printing
// "converge-image: NAME" once it runs (the kernel unpacks concatenated
// archives in order, so the later /init replaces the first). A console
// showing the marker proves that this image, not base, was booted. It
// needs cpio and gzip. An existing image of that name is replaced.
func BuildMarkedImage(ctx context.Context, store, base, name string) error {
	if !ValidImageName(name) || !ValidImageName(base) {
		return fmt.Errorf("image names %q and %q must be valid image names", base, name)
	}
	work, err := os.MkdirTemp(store, ".mark-")
	if err != nil {
		return fmt.Errorf("making image %s: %w", name, err)
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	init := strings.Replace(initScript, `echo "`+InitMarker+`"`, `echo "`+InitMarker+`"`+"\n"+`echo "`+ImageMarker+` `+name+`"`, 1)
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(init), 0o755); err != nil {
		return err
	}
	extra := filepath.Join(work, "extra.cpio.gz")
	cmd := exec.CommandContext(ctx, "sh", "-c", "echo init | cpio -o -H newc --quiet | gzip -1 > "+shellQuote(extra))
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("packing the marker archive of image %s: %w: %s", name, err, b)
	}
	out := filepath.Join(work, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	baseDir := filepath.Join(store, base)
	if err := copyFile(filepath.Join(baseDir, KernelFile), filepath.Join(out, KernelFile), 0o644); err != nil {
		return fmt.Errorf("making image %s: %w", name, err)
	}
	first, err := os.ReadFile(filepath.Join(baseDir, InitrdFile))
	if err != nil {
		return fmt.Errorf("making image %s: %w", name, err)
	}
	second, err := os.ReadFile(extra)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, InitrdFile), append(first, second...), 0o644); err != nil { //nolint:gosec // images are world-readable like the base image
		return err
	}
	dst := filepath.Join(store, name)
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return os.Rename(out, dst)
}
