package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NetworkConfig is one NIC of a machine.
type NetworkConfig struct {
	// networkName names the network; the IPPool of this namespace serving it
	// provides the address.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=11
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	NetworkName string `json:"networkName"`

	// macAddress is the NIC's MAC address, lowercase and colon-separated.
	// +required
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	MACAddress string `json:"macAddress"`

	// ipAddress asks for this address (static); it must be inside the
	// pool's CIDR and not held by another MAC. Empty: any free address of
	// the pool's range.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	IPAddress string `json:"ipAddress,omitempty"`
}

// MachineNetworkConfigSpec is the desired state of a MachineNetworkConfig.
type MachineNetworkConfigSpec struct {
	// networkConfigs lists the NICs, one per MAC address.
	// +required
	// +listType=map
	// +listMapKey=macAddress
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	NetworkConfigs []NetworkConfig `json:"networkConfigs"`
}

// NetworkConfigState is the state of one NIC's address.
// +kubebuilder:validation:Enum=Allocated;Pending;Stale
type NetworkConfigState string

// NIC states.
const (
	// StateAllocated: the address is recorded in the pool's status.
	StateAllocated NetworkConfigState = "Allocated"
	// StatePending: no address yet (see the Ready condition).
	StatePending NetworkConfigState = "Pending"
	// StateStale: the address is recorded but no longer matches the spec
	// (being released).
	StateStale NetworkConfigState = "Stale"
)

// NetworkConfigStatus is the observed state of one NIC.
type NetworkConfigStatus struct {
	// macAddress is the NIC.
	// +required
	// +kubebuilder:validation:MaxLength=17
	MACAddress string `json:"macAddress"`

	// networkName is the NIC's network.
	// +required
	// +kubebuilder:validation:MaxLength=11
	NetworkName string `json:"networkName"`

	// pool names the IPPool the address comes from.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool,omitempty"`

	// allocatedIPAddress is the address recorded for the NIC.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	AllocatedIPAddress string `json:"allocatedIPAddress,omitempty"`

	// state is Allocated, Pending or Stale.
	// +required
	State NetworkConfigState `json:"state"`
}

// MachineNetworkConfigStatus is the observed state of a
// MachineNetworkConfig.
type MachineNetworkConfigStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// networkConfigs is the state of each NIC.
	// +optional
	// +listType=map
	// +listMapKey=macAddress
	// +kubebuilder:validation:MaxItems=8
	NetworkConfigs []NetworkConfigStatus `json:"networkConfigs,omitempty"`

	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MachineNetworkConfig holds the NICs of one machine and the addresses they
// get. One is made for every Machine with NICs (same name, owned by the
// Machine); hand-made ones work the same.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mnc,categories={converge,dhcp}
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.networkConfigs[0].allocatedIPAddress`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type MachineNetworkConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec MachineNetworkConfigSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status MachineNetworkConfigStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions.
func (m *MachineNetworkConfig) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions.
func (m *MachineNetworkConfig) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// MachineNetworkConfigList is a list of MachineNetworkConfigs.
//
// +kubebuilder:object:root=true
type MachineNetworkConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineNetworkConfig `json:"items"`
}
