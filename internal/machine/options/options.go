// Package options holds the machine options the manager and the machine
// agent share (state and image directories, QEMU, where VMs run) and their
// defaults, so that an agent need not import the manager's wiring
// (internal/setup) for them.
package options

import (
	"path/filepath"
	"time"
)

// Machines configure the Machine controller and the machine providers
// (the manager's --machine-* flags; the machine agent's too).
type Machines struct {
	// DrainTimeout bounds the drain of a deleted Machine's Node; after it
	// the deletion goes on. Zero is the controller's default (10 minutes).
	DrainTimeout time.Duration
	// StateDir holds each QEMU VM's pidfile, QMP socket and console log;
	// it outlives the manager, so that a restart re-attaches to the VMs.
	StateDir string
	// ImageDir is the image store QemuMachine's spec.image names a
	// directory of (`make images` builds the test image there).
	ImageDir string
	// Netns is the network namespace holding the bridges and taps of
	// QemuMachine NICs (created when missing; needs root). Empty uses QEMU
	// user-mode networking: each NIC gets 10.0.2.15 from QEMU and nothing
	// else reaches the VM.
	Netns string
	// PowerDownGrace is how long a VM gets to power down (ACPI) before
	// QEMU is told to quit; zero is the controller's default (30 s),
	// negative quits at once.
	PowerDownGrace time.Duration
	// QemuBinary is qemu-system-x86_64's path; looked up in PATH when
	// empty.
	QemuBinary string
	// StopVMsOnExit quits every VM when the manager stops (`converge up`).
	StopVMsOnExit bool
	// QemuAccel is QEMU's accelerator: "kvm", "tcg" or "" (KVM where the
	// CPU advertises hardware virtualisation and /dev/kvm opens, else TCG).
	QemuAccel string
	// QemuMachines says where QemuMachine VMs run: QemuMachinesManager
	// ("" too: in this manager's process, as `converge up` does) or
	// QemuMachinesAgent (under the per-node `converge agent machines`; this
	// manager then only binds QemuMachines to nodes).
	QemuMachines string
	// AgentLeaseNamespace holds the machine agents' heartbeat Leases
	// (QemuMachinesAgent); "converge-system" when empty.
	AgentLeaseNamespace string
	// AgentCheckInterval is how often the scheduler looks at the agents'
	// heartbeats again (QemuMachinesAgent); 5 s when zero.
	AgentCheckInterval time.Duration
	// NetbootHTTPPort is the port of the DHCP agent's network boot HTTP
	// server on the server address of each IPPool with networkBoot (inside
	// Netns); zero is 8069.
	NetbootHTTPPort int
}

// Values of Machines.QemuMachines.
const (
	// QemuMachinesManager runs QemuMachine VMs in the manager's process.
	QemuMachinesManager = "manager"
	// QemuMachinesAgent runs them under per-node machine agents.
	QemuMachinesAgent = "agent"
)

// DefaultAgentLeaseNamespace holds the machine agents' heartbeat Leases.
const DefaultAgentLeaseNamespace = "converge-system"

// Defaults of the machine stores in a cluster (volumes of the node agent).
const (
	DefaultMachineStateDir = "/var/lib/converge/machines"
	DefaultMachineImageDir = "/var/lib/converge/images"
)

// LocalMachineDirs are the VM state and image directories of local mode,
// under the data directory.
func LocalMachineDirs(dataDir string) (state, images string) {
	return filepath.Join(dataDir, "machines"), filepath.Join(dataDir, "images")
}
