// Package qemu starts and supervises QEMU virtual machines for the
// QemuMachine provider: it builds the test image from Debian packages,
// launches QEMU daemonized (its own locked pidfile, a QMP socket, the serial
// console to a file), re-attaches to a running QEMU after a manager restart
// without rebooting it, drives power through QMP, and puts NICs on taps in
// bridges inside a network namespace.
package qemu
