// Package qemutest holds the MachineUpgrade test over real QEMU machines:
// QemuMachines network-booted by the DHCP agent, power cycled through
// their MachineBMCs' Redfish endpoints, checked on their serial consoles.
// It needs root (a network namespace, bridges and taps), qemu-system-x86_64
// and the test images, and its own control plane running the IPAM, DHCP
// agent, Machine, QemuMachine, MachineBMC and MachineUpgrade controllers.
package qemutest
