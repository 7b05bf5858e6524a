package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// QemuMachineSpec is the desired state of a QemuMachine.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.nodeName) || (has(self.nodeName) && self.nodeName == oldSelf.nodeName)",message="spec.nodeName is immutable once set: the VM runs under that node's agent and is never started on a second node"
type QemuMachineSpec struct {
	MachineSpecFields `json:",inline"`

	// nodeName binds the QemuMachine to the node whose machine agent
	// (`converge agent machines`) runs its VM. Set by the manager's
	// scheduler (with --qemu-machines=agent) or by the user; immutable once
	// set. A manager running VMs itself (--qemu-machines=manager, `converge
	// up`) runs only QemuMachines without it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	NodeName string `json:"nodeName,omitempty"`

	// cpus is the number of virtual CPUs. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	CPUs int32 `json:"cpus,omitempty"`

	// memoryMiB is the memory in MiB. Default 256.
	// +optional
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=16384
	MemoryMiB int32 `json:"memoryMiB,omitempty"`
}

// QemuMachineStatus is the observed state of a QemuMachine.
type QemuMachineStatus struct {
	MachineStatusFields `json:",inline"`

	// nodeName is the node whose machine agent runs the VM; empty when
	// the manager runs it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// pid is the QEMU process's id while it runs.
	// +optional
	PID int32 `json:"pid,omitempty"`

	// bootOnceGeneration is the generation whose bootOnce was used: later
	// boots of the same generation boot from Disk.
	// +optional
	BootOnceGeneration int64 `json:"bootOnceGeneration,omitempty"`

	// lastResetToken is the value of the infrastructure.converge.dev/reset
	// annotation last acted on.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	LastResetToken string `json:"lastResetToken,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="contract.converge.dev/infrastructure-machine=v1alpha1"
// +kubebuilder:resource:shortName=qm,categories=converge;machines
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="PID",type=integer,JSONPath=`.status.pid`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Console",type=string,JSONPath=`.status.consoleLog`,priority=1

// QemuMachine is a QEMU virtual machine, started and supervised by Converge.
type QemuMachine struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +optional
	Spec QemuMachineSpec `json:"spec,omitempty"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status QemuMachineStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// QemuMachineList is a list of QemuMachines.
type QemuMachineList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the QemuMachines.
	Items []QemuMachine `json:"items"`
}
