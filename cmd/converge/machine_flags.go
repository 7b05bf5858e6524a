package main

import (
	"github.com/spf13/pflag"

	"github.com/converge-dev/converge/internal/setup"
)

// addMachineFlags adds the Machine controller's and the providers' flags.
func addMachineFlags(f *pflag.FlagSet, o *setup.MachineOptions) {
	f.DurationVar(&o.DrainTimeout, "machine-drain-timeout", o.DrainTimeout, "how long the drain of a deleted Machine's Node may take before the deletion goes on (default 10m)")
	f.StringVar(&o.StateDir, "machine-state-dir", o.StateDir, "QEMU VMs' pidfiles, QMP sockets and console logs (default "+setup.DefaultMachineStateDir+"; `up`: <data-dir>/machines)")
	f.StringVar(&o.ImageDir, "machine-image-dir", o.ImageDir, "image store of QemuMachine spec.image (default "+setup.DefaultMachineImageDir+"; `up`: <data-dir>/images; `make images` fills it)")
	f.StringVar(&o.Netns, "machine-netns", o.Netns, "network namespace for the bridges and taps of QemuMachine NICs (needs root); empty: QEMU user-mode networking")
	f.StringVar(&o.QemuAccel, "machine-qemu-accel", o.QemuAccel, "QEMU accelerator for QemuMachines: kvm, tcg, or empty for KVM where the CPU advertises vmx/svm and /dev/kvm opens, else TCG")
	f.IntVar(&o.NetbootHTTPPort, "netboot-http-port", o.NetbootHTTPPort, "port of the network boot HTTP server the DHCP agent runs on the server address of each IPPool with networkBoot, inside --machine-netns (default 8069)")
	f.DurationVar(&o.PowerDownGrace, "machine-power-down-grace", o.PowerDownGrace, "how long a VM gets to power down (ACPI) before QEMU quits (default 30s)")
}
