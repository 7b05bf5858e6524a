// Command images builds the QemuMachine test image ("busybox": the Debian
// cloud kernel and a busybox initramfs whose init runs a DHCP client on
// every NIC) into the image cache, or into -dir (for example a `converge up`
// data directory's images/).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/converge-dev/converge/internal/qemu"
)

func main() {
	def, err := qemu.TestImageDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir := flag.String("dir", def, "image store to build into")
	flag.Parse()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := qemu.BuildBusyboxImage(context.Background(), *dir, "busybox"); err != nil { //nolint:forbidigo // a command
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	fmt.Println("built", *dir+"/busybox")
}
