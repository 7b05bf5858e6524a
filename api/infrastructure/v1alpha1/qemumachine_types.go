package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// QemuMachineSpec is the desired state of a QemuMachine.
type QemuMachineSpec struct {
	MachineSpecFields `json:",inline"`

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
// +kubebuilder:resource:shortName=qm,categories=converge;machines
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
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
