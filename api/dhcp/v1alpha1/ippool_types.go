package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddressRange is the part of a CIDR handed out dynamically.
type AddressRange struct {
	// start is the first address handed out (inside cidr).
	// +required
	// +kubebuilder:validation:MinLength=7
	// +kubebuilder:validation:MaxLength=15
	Start string `json:"start"`

	// end is the last address handed out (inside cidr, not before start).
	// +required
	// +kubebuilder:validation:MinLength=7
	// +kubebuilder:validation:MaxLength=15
	End string `json:"end"`

	// exclude lists addresses of the range never handed out.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=15
	Exclude []string `json:"exclude,omitempty"`
}

// IPv4Config is what the DHCP agent serves on the pool's network.
type IPv4Config struct {
	// serverIP is the DHCP server's address on the network (option 54):
	// inside cidr, outside pool.
	// +required
	// +kubebuilder:validation:MinLength=7
	// +kubebuilder:validation:MaxLength=15
	ServerIP string `json:"serverIP"`

	// cidr is the network's IPv4 subnet, for example 10.10.0.0/24 (option 1
	// is its mask).
	// +required
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=18
	CIDR string `json:"cidr"`

	// pool is the range handed out.
	// +required
	Pool AddressRange `json:"pool"`

	// router is the default gateway (option 3): inside cidr, outside pool.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	Router string `json:"router,omitempty"`

	// dns lists at most 3 DNS servers (option 6).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:MaxLength=15
	DNS []string `json:"dns,omitempty"`

	// domainName is the DNS domain (option 15).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DomainName string `json:"domainName,omitempty"`

	// domainSearch lists search domains (option 119).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=6
	// +kubebuilder:validation:items:MaxLength=253
	DomainSearch []string `json:"domainSearch,omitempty"`

	// ntp lists at most 4 NTP servers (option 42).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=15
	NTP []string `json:"ntp,omitempty"`

	// leaseTime is the lease time in seconds (option 51); default 3600.
	// Clients renew at half of it and learn pool changes then.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=2592000
	LeaseTime int32 `json:"leaseTime,omitempty"`

	// networkBoot makes the DHCP agent network-boot the pool's Machines:
	// an iPXE client (option 77 "iPXE", as QEMU's NIC ROM sends) with an
	// allocation gets the boot file (option 67)
	// http://<serverIP>:<--netboot-http-port>/boot/<mac>.ipxe, an iPXE
	// script loading the kernel and initrd of its Machine's current
	// spec.image from the agent. Other clients get the same answers as
	// without it.
	// +optional
	NetworkBoot bool `json:"networkBoot,omitempty"`
}

// IPPoolSpec is the desired state of an IPPool.
type IPPoolSpec struct {
	// networkName names the machine network (Machine
	// spec.networkInterfaces[].network) the pool serves. Pools of one
	// network may not overlap, across namespaces.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=11
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	NetworkName string `json:"networkName"`

	// ipv4Config is the subnet, range and options.
	// +required
	IPv4Config IPv4Config `json:"ipv4Config"`

	// paused stops new allocations from the pool; existing ones are kept
	// and still served.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// Allocation is one address of a pool held by a MAC address.
type Allocation struct {
	// ip is the allocated address.
	// +required
	// +kubebuilder:validation:MaxLength=15
	IP string `json:"ip"`

	// macAddress is the NIC holding it.
	// +required
	// +kubebuilder:validation:MaxLength=17
	MACAddress string `json:"macAddress"`

	// owner is the MachineNetworkConfig (in the pool's namespace) that
	// holds the address.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Owner string `json:"owner"`

	// ownerUID is the owner's UID, so a re-created owner of the same name
	// does not inherit a stale allocation by accident.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	OwnerUID string `json:"ownerUID,omitempty"`

	// static is true for an address the owner asked for (ipAddress).
	// +optional
	Static bool `json:"static,omitempty"`
	// claimedAt is when the MAC address was first allocated an address
	// here. A MAC address belongs to one namespace per network: the first
	// claim wins (earliest claimedAt, then namespace and pool name), and a
	// later one is refused (MACAddressClaimed).
	// +optional
	ClaimedAt *metav1.Time `json:"claimedAt,omitempty"`
}

// IPv4Status is the pool's allocations.
type IPv4Status struct {
	// allocated lists every address held, by IP. An address appears here
	// before any DHCP server offers it.
	// +optional
	// +listType=map
	// +listMapKey=ip
	// +kubebuilder:validation:MaxItems=8192
	Allocated []Allocation `json:"allocated,omitempty"`

	// used counts the allocated addresses.
	// +optional
	Used int32 `json:"used"`

	// available counts the addresses of the range still free.
	// +optional
	Available int32 `json:"available"`
}

// AgentStatus says where the DHCP agent serves the pool.
type AgentStatus struct {
	// netns is the network namespace the agent listens in.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Netns string `json:"netns,omitempty"`

	// interface is the interface (the network's bridge) it listens on.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	Interface string `json:"interface,omitempty"`

	// identity names the manager replica running the agent.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Identity string `json:"identity,omitempty"`
}

// IPPoolStatus is the observed state of an IPPool.
type IPPoolStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ipv4 holds the allocations and counts.
	// +optional
	IPv4 IPv4Status `json:"ipv4,omitempty"`

	// agent says where the DHCP agent serves the pool.
	// +optional
	Agent AgentStatus `json:"agent,omitempty"`

	// conditions: Ready, AgentReady, Exhausted.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPPool is a range of a machine network's subnet handed out by DHCP to
// the MAC addresses of MachineNetworkConfigs in its namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ippl,categories={converge,dhcp}
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.spec.networkName`
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.ipv4Config.cidr`
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.status.ipv4.used`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.ipv4.available`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.conditions[?(@.type=="AgentReady")].reason`,priority=1
type IPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec IPPoolSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status IPPoolStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions.
func (p *IPPool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions sets the conditions.
func (p *IPPool) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// IPPoolList is a list of IPPools.
//
// +kubebuilder:object:root=true
type IPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPPool `json:"items"`
}
