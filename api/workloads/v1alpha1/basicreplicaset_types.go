package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BasicReplicaSetSpec is the desired state of a BasicReplicaSet.
type BasicReplicaSetSpec struct {
	// replicas is the number of Pods wanted. Defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Replicas *int32 `json:"replicas,omitempty"`

	// selector is a label query over the Pods this BasicReplicaSet owns.
	// It must match the template's labels and cannot be changed.
	// +required
	Selector *metav1.LabelSelector `json:"selector"`

	// template describes the Pods created to reach replicas.
	// +required
	Template corev1.PodTemplateSpec `json:"template"`

	// minReadySeconds is how long a new Pod must be Ready, without any of its
	// containers crashing, to count as available. Defaults to 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`
}

// BasicReplicaSetStatus is the observed state of a BasicReplicaSet.
type BasicReplicaSetStatus struct {
	// replicas is the number of Pods owned that are not being deleted.
	// +optional
	Replicas int32 `json:"replicas"`

	// readyReplicas is the number of owned Pods with a Ready condition.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// availableReplicas is the number of owned Pods Ready for at least
	// minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`

	// terminatingReplicas is the number of owned Pods being deleted that
	// have not yet stopped (not Succeeded or Failed). A Recreate rollout
	// waits for it to reach 0.
	// +optional
	TerminatingReplicas int32 `json:"terminatingReplicas,omitempty"`

	// selector is the serialized label selector, for the scale subresource.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Selector string `json:"selector,omitempty"`

	// observedGeneration is the generation last fully reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the current state: Ready, and ReplicaFailure
	// (with the API error) when a Pod cannot be created or deleted.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=brs,categories={converge,workloads}
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// BasicReplicaSet keeps a number of identical Pods running. It is the child
// half of the parent-child example; a BasicDeployment manages BasicReplicaSets
// only through their spec and status.
type BasicReplicaSet struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec BasicReplicaSetSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status BasicReplicaSetStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BasicReplicaSetList is a list of BasicReplicaSets.
type BasicReplicaSetList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the BasicReplicaSets.
	Items []BasicReplicaSet `json:"items"`
}

// GetConditions returns the conditions, for the conditions helpers.
func (r *BasicReplicaSet) GetConditions() []metav1.Condition { return r.Status.Conditions }

// SetConditions sets the conditions, for the conditions helpers.
func (r *BasicReplicaSet) SetConditions(c []metav1.Condition) { r.Status.Conditions = c }
