package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PowerState is a machine's power state.
// +kubebuilder:validation:Enum=On;Off
type PowerState string

const (
	// PowerOn is the state of a machine that runs.
	PowerOn PowerState = "On"
	// PowerOff is the state of a machine that is stopped (a VM's process has exited, a kwok
	// Node is NotReady).
	PowerOff PowerState = "Off"
)

// BootDevice is the device a machine boots from.
// +kubebuilder:validation:Enum=Disk;Network;CDROM
type BootDevice string

const (
	// BootDisk boots the machine's image (a disk, or a kernel and initramfs).
	BootDisk BootDevice = "Disk"
	// BootNetwork boots from the network (PXE/iPXE).
	BootNetwork BootDevice = "Network"
	// BootCDROM boots from a CD-ROM image.
	BootCDROM BootDevice = "CDROM"
)

// MachinePhase is a one-word summary of a Machine for people; automation
// reads the conditions.
// +kubebuilder:validation:Enum=Pending;Provisioning;Running;PoweredOff;Deleting;Failed
type MachinePhase string

// Machine phases.
const (
	// PhasePending: the provider object is missing or not yet owned.
	PhasePending MachinePhase = "Pending"
	// PhaseProvisioning: the provider is making the machine real.
	PhaseProvisioning MachinePhase = "Provisioning"
	// PhaseRunning: provisioned and powered on.
	PhaseRunning MachinePhase = "Running"
	// PhasePoweredOff: provisioned and powered off.
	PhasePoweredOff MachinePhase = "PoweredOff"
	// PhaseDeleting: the Machine is being deleted (hooks, drain, provider).
	PhaseDeleting MachinePhase = "Deleting"
	// PhaseFailed: something only a person can fix (see the Ready condition).
	PhaseFailed MachinePhase = "Failed"
)

// InfrastructureReference names the provider object, in the Machine's
// namespace, of any kind that honours the infrastructure-machine contract.
// There is no namespace field: a Machine never reaches into another
// namespace.
type InfrastructureReference struct {
	// apiVersion is the group/version of the provider kind, for example
	// infrastructure.converge.dev/v1alpha1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`

	// kind is the provider kind, for example QemuMachine.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`

	// name is the provider object's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NetworkInterface is one NIC of a machine.
type NetworkInterface struct {
	// name names the NIC within the machine, for example eth0.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]*$`
	Name string `json:"name"`

	// network names the network the NIC is attached to; the provider
	// resolves it (QemuMachine: a bridge in Converge's network namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=11
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	Network string `json:"network"`

	// macAddress is the NIC's unicast MAC address, lowercase and
	// colon-separated. When empty the admission webhook fills in a stable,
	// locally administered address derived from the Machine's namespace,
	// name and the NIC's name; a MAC used by two Machines is reported
	// (DuplicateMACAddress) and not handed to the provider.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	MACAddress string `json:"macAddress,omitempty"`
}

// MachineSpec is the desired state of a Machine.
type MachineSpec struct {
	// infrastructureRef names the provider object (QemuMachine,
	// KwokMachine, or any kind honouring the infrastructure-machine
	// contract) in this namespace. Immutable.
	// +required
	InfrastructureRef InfrastructureReference `json:"infrastructureRef"`

	// powerState is the wanted power state. Default On.
	// +optional
	PowerState PowerState `json:"powerState,omitempty"`

	// bootDevice is the device to boot from. Default Disk.
	// +optional
	BootDevice BootDevice `json:"bootDevice,omitempty"`

	// bootOnce boots from bootDevice at the next boot only; later boots use
	// Disk.
	// +optional
	BootOnce bool `json:"bootOnce,omitempty"`

	// image names what the machine boots, resolved by the provider (for
	// QemuMachine a directory of its image store holding a kernel and
	// initramfs or a disk). Lowercase letters, digits, '.', '_' and '-'.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]*$`
	Image string `json:"image,omitempty"`

	// version is free text (the version of what runs on the machine) that
	// the upgrade controller reads and writes.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version,omitempty"`

	// networkInterfaces lists the machine's NICs.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	NetworkInterfaces []NetworkInterface `json:"networkInterfaces,omitempty"`

	// paused stops the controller from acting on this Machine (status is
	// still observed). Deletion waits while paused.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// MachineAddress is an address of a machine.
type MachineAddress struct {
	// type is the address type: InternalIP, ExternalIP, Hostname, ...
	// +required
	// +kubebuilder:validation:MaxLength=32
	Type string `json:"type"`

	// address is the address.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Address string `json:"address"`
}

// NodeReference names a cluster-scoped Node.
type NodeReference struct {
	// name is the Node's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid is the Node's UID: a drain or a deletion touches only the Node
	// with this UID (a Node made again under the name is not this one).
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// MachineDeletionStatus records the progress of a deletion.
type MachineDeletionStatus struct {
	// nodeDrainStartTime is when the drain of the Node began; the drain
	// timeout counts from it.
	// +optional
	NodeDrainStartTime *metav1.Time `json:"nodeDrainStartTime,omitempty"`
}

// MachineStatus is the observed state of a Machine.
type MachineStatus struct {
	// phase is a one-word summary for people.
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`

	// providerID is the provider object's spec.providerID.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// addresses are the provider's observed addresses.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []MachineAddress `json:"addresses,omitempty"`

	// powerState is the provider's observed power state.
	// +optional
	PowerState PowerState `json:"powerState,omitempty"`

	// bootDevice is the device the machine last booted from, as the
	// provider observed it.
	// +optional
	BootDevice BootDevice `json:"bootDevice,omitempty"`

	// consoleLog is where the provider keeps the serial console (a path on
	// the host that runs the machine).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	ConsoleLog string `json:"consoleLog,omitempty"`

	// nodeRef is the Node whose spec.providerID equals providerID.
	// +optional
	NodeRef *NodeReference `json:"nodeRef,omitempty"`

	// deletion records the progress of a deletion.
	// +optional
	Deletion *MachineDeletionStatus `json:"deletion,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, InfrastructureReady, NodeHealthy, and Deleting
	// while the Machine is being deleted.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mach,categories=converge;machines
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.infrastructureRef.kind`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.addresses[0].address`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.status.providerID`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// Machine is a machine (a VM, a bare-metal host, a kwok Node) described
// independently of its provider.
type Machine struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec MachineSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status MachineStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MachineList is a list of Machines.
type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the Machines.
	Items []Machine `json:"items"`
}

// EffectivePowerState is spec.powerState with its default (On).
func (m *Machine) EffectivePowerState() PowerState {
	if m.Spec.PowerState == "" {
		return PowerOn
	}
	return m.Spec.PowerState
}

// EffectiveBootDevice is spec.bootDevice with its default (Disk).
func (m *Machine) EffectiveBootDevice() BootDevice {
	if m.Spec.BootDevice == "" {
		return BootDisk
	}
	return m.Spec.BootDevice
}
