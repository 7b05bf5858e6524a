package qemu

import (
	"os"
	"path/filepath"
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
