// Package qemutest holds the MachineBMC tests that drive a real QEMU VM
// (QemuMachine, TCG): they need the test image and qemu-system-x86_64, and
// their own control plane with the qemumachine controller.
package qemutest
