package setup

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/internal/bmc"
)

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
