package setup

import (
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/internal/bmc"
)

// MachineOptions configure the Machine controller and the machine
// providers.
type MachineOptions struct {
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

// BMCOptions configure the virtual BMCs (the machinebmc controller and its
// BMC server).
type BMCOptions struct {
	// BindAddress is the address the BMCs' listeners bind; 127.0.0.1 when
	// empty. In a cluster: 0.0.0.0 (with AdvertiseAddress the Pod's IP).
	BindAddress string
	// AdvertiseAddress is the address the endpoints (or, with Expose
	// Service, the EndpointSlices) name and the Redfish certificate
	// carries; BindAddress when empty.
	AdvertiseAddress string
	// Netns, when set, is the network namespace the BMCs listen in (and
	// the controller probes from).
	Netns string
	// Expose is "Local" (publish the listeners' addresses; the default)
	// or "Service" (a Service of spec.service.type per MachineBMC whose
	// EndpointSlice names AdvertiseAddress: the mode of a manager in a
	// cluster).
	Expose string
	// CASecret is "[namespace/]name" of the Secret keeping the CA of the
	// Redfish certificates, in the manager's namespace (tenants must not
	// be able to write it): the BMC server creates it once and issues from
	// it, the MachineUpgrade controller verifies the BMCs with it. Empty:
	// DefaultBMCCASecretNamespace/converge-bmc-ca; a bare name is in
	// DefaultBMCCASecretNamespace (`converge run` puts it in the Pod's
	// namespace).
	CASecret string
}

// DefaultBMCCASecretNamespace is the namespace of the BMC CA Secret when
// BMCOptions.CASecret names none: `converge up` and the tests (which
// create it).
const DefaultBMCCASecretNamespace = "converge-system"

// CASecretKey is where the BMC CA Secret is.
func (o BMCOptions) CASecretKey() types.NamespacedName {
	ns, name, ok := strings.Cut(o.CASecret, "/")
	if !ok {
		ns, name = DefaultBMCCASecretNamespace, o.CASecret
	}
	if name == "" {
		name = bmc.DefaultCASecretName
	}
	if ns == "" {
		ns = DefaultBMCCASecretNamespace
	}
	return types.NamespacedName{Namespace: ns, Name: name}
}

// Values of MachineOptions.QemuMachines.
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

// DHCPAgentOptions configure cluster mode of the DHCP agent: the
// dhcp-agent-deployment controller (internal/controller/dhcpagentdeployment).
type DHCPAgentOptions struct {
	// Image is the converge image the per-network agent Deployments run.
	// Empty (the default) is local mode: the dhcp-agent controller serves
	// inside the manager (--machine-netns) and no Deployment is made; set,
	// the dhcp-agent controller is off and dhcp-agent-deployment runs.
	Image string
	// Namespace holds the agent Deployments and their Leases; empty is the
	// manager's namespace.
	Namespace string
	// ServiceAccount is the agents' ServiceAccount (the chart makes it and
	// binds the dhcp-agent ClusterRole).
	ServiceAccount string
	// Attachment is the agent Pods' k8s.v1.cni.cncf.io/networks value,
	// with "{network}" replaced by the network's name; the IPPool
	// annotation dhcp.converge.dev/agent-attachment overrides it. Empty is
	// "{network}".
	Attachment string
	// Interface is the attachment's interface in the agent Pod; empty is
	// net1.
	Interface string
}
