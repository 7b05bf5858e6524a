package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
)

// MachineSpecFields are the contract's spec fields, shared by the built-in
// providers. The Machine controller writes powerState, bootDevice, bootOnce,
// image and networkInterfaces; the provider writes providerID.
type MachineSpecFields struct {
	// providerID identifies the machine to the rest of the cluster; a Node
	// with the same spec.providerID is this machine's Node. Set by the
	// provider once, then immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// powerState is the wanted power state. Default On, except that a
	// QemuMachine no Machine controls yet starts nothing until it is set
	// (its Machine writes it together with the NICs).
	// +optional
	PowerState machinev1alpha1.PowerState `json:"powerState,omitempty"`

	// bootDevice is the device to boot from. Default Disk.
	// +optional
	BootDevice machinev1alpha1.BootDevice `json:"bootDevice,omitempty"`

	// bootOnce boots from bootDevice at the next boot only.
	// +optional
	BootOnce bool `json:"bootOnce,omitempty"`

	// image names what the machine boots (see the provider).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]*$`
	Image string `json:"image,omitempty"`

	// networkInterfaces lists the NICs, with their MAC addresses.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	NetworkInterfaces []machinev1alpha1.NetworkInterface `json:"networkInterfaces,omitempty"`
}

// MachineStatusFields are the contract's status fields, shared by the
// built-in providers.
type MachineStatusFields struct {
	// provisioned is true once the machine exists (a VM defined, a Node
	// registered).
	// +optional
	Provisioned bool `json:"provisioned,omitempty"`

	// powerState is the observed power state.
	// +optional
	PowerState machinev1alpha1.PowerState `json:"powerState,omitempty"`

	// bootDevice is the device the machine last booted from.
	// +optional
	BootDevice machinev1alpha1.BootDevice `json:"bootDevice,omitempty"`

	// addresses are the machine's observed addresses.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []machinev1alpha1.MachineAddress `json:"addresses,omitempty"`

	// consoleLog is where the serial console is kept (a path on the host
	// running the machine); empty when there is none.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	ConsoleLog string `json:"consoleLog,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons of the providers.
const (
	// ReadyCondition is True when the machine is provisioned and in the
	// wanted power state.
	ReadyCondition = "Ready"

	// PoweredOnReason: the machine runs.
	PoweredOnReason = "PoweredOn"
	// PoweringReason: the machine is on its way to the wanted power state.
	PoweringReason = "Powering"
	// PoweredOffReason: the machine is off, as asked.
	PoweredOffReason = "PoweredOff"
	// ImageNotFoundReason: spec.image names nothing in the image store.
	ImageNotFoundReason = "ImageNotFound"
	// NetworkUnavailableReason: the network namespace, bridge or tap could
	// not be made (the message says why; often missing root or
	// CAP_NET_ADMIN).
	NetworkUnavailableReason = "NetworkUnavailable"
	// StartFailedReason: QEMU failed to start; the message holds its error.
	StartFailedReason = "StartFailed"
	// WaitingForMachineReason: a QemuMachine no Machine controls yet and
	// whose spec.powerState is unset starts nothing: its Machine writes the
	// power state and the NICs in one patch, and a VM started before that
	// would boot without its network.
	WaitingForMachineReason = "WaitingForMachine"
	// AgentReadyCondition (QemuMachines bound to a node) is True while
	// the machine agent of spec.nodeName heartbeats. The manager's
	// scheduler owns it.
	AgentReadyCondition = "AgentReady"
	// AgentHeartbeatingReason: the agent on spec.nodeName renews its
	// heartbeat Lease.
	AgentHeartbeatingReason = "AgentHeartbeating"
	// AgentNotHeartbeatingReason: the agent on spec.nodeName stopped
	// renewing its heartbeat Lease (or never had one). The QemuMachine
	// keeps its binding: its VM, if any, still runs on that node, and is
	// never started on a second one.
	AgentNotHeartbeatingReason = "AgentNotHeartbeating"
	// NoAgentAvailableReason: the QemuMachine is not bound yet and no
	// machine agent heartbeats, so no node can take it.
	NoAgentAvailableReason = "NoAgentAvailable"
	// NodeConflictReason: a Node with the KwokMachine's name exists and was
	// not made for it; it is never adopted.
	NodeConflictReason = "NodeConflict"
	// ProviderIDNotOwnReason: spec.providerID is not the object's own
	// (it was written around the admission webhook); nothing is
	// registered under it. Stalled too: only a person can help.
	ProviderIDNotOwnReason = "ProviderIDNotOwn"
)

// Finalizers of the providers.
const (
	// QemuMachineFinalizer is held until the VM has stopped and its taps and
	// state directory are gone.
	QemuMachineFinalizer = "infrastructure.converge.dev/qemumachine"
	// KwokMachineFinalizer is held until the Node is gone.
	KwokMachineFinalizer = "infrastructure.converge.dev/kwokmachine"
)
