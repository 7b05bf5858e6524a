package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KwokMachineSpec is the desired state of a KwokMachine.
type KwokMachineSpec struct {
	MachineSpecFields `json:",inline"`
}

// KwokMachineStatus is the observed state of a KwokMachine.
type KwokMachineStatus struct {
	MachineStatusFields `json:",inline"`

	// nodeName is the Node registered for this machine.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="contract.converge.dev/infrastructure-machine=v1alpha1"
// +kubebuilder:resource:shortName=km,categories=converge;machines
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// KwokMachine is a machine played by a Node that kwok serves: registering
// it provisions the machine, powering it off makes the Node NotReady.
type KwokMachine struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +optional
	Spec KwokMachineSpec `json:"spec,omitempty"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status KwokMachineStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// KwokMachineList is a list of KwokMachines.
type KwokMachineList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the KwokMachines.
	Items []KwokMachine `json:"items"`
}
