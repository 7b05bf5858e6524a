package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bounds of an IPAddressPool's status, as its schema declares them (the
// MaxItems and MaxLength markers below must say the same).
const (
	// MaxAssignments is the most entries status.assignments may hold.
	MaxAssignments = 65536
	// MaxAssignmentPorts is the most ports one assignment may record: a
	// Service with more gets no address.
	MaxAssignmentPorts = 128
	// MaxSharingKeyLength is the longest sharing key (the
	// lb.converge.dev/allow-shared-ip annotation) an assignment records,
	// in characters: a Service with a longer one gets no address.
	MaxSharingKeyLength = 253
)

// IPAddressPoolSpec defines the addresses of a pool and who may use them.
type IPAddressPoolSpec struct {
	// addresses are IPv4 CIDRs ("192.0.2.0/28") or inclusive ranges
	// ("192.0.2.10-192.0.2.20"). Pools may not overlap.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	Addresses []string `json:"addresses"`

	// autoAssign lets Services without the lb.converge.dev/pool annotation
	// get addresses from this pool. Default true.
	// +optional
	AutoAssign *bool `json:"autoAssign,omitempty"`

	// avoidBuggyIPs skips addresses ending in .0 and .255.
	// +optional
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`

	// serviceAllocation restricts the pool to namespaces and Services and
	// orders it among pools. Without it every namespace may use the pool.
	// +optional
	ServiceAllocation *ServiceAllocation `json:"serviceAllocation,omitempty"`
}

// ServiceAllocation grants a pool to namespaces and Services.
type ServiceAllocation struct {
	// priority orders pools for auto-assignment: lower first.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Priority int32 `json:"priority,omitempty"`

	// namespaces may use the pool (with namespaceSelectors: either grants).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces,omitempty"`

	// namespaceSelectors grant the pool to namespaces with matching labels.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`

	// serviceSelectors restrict the pool to Services with matching labels.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// ServiceRef names the Service an address is assigned to.
type ServiceRef struct {
	// namespace of the Service.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the Service.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the Service: a re-created Service with the same name is a
	// different Service.
	// +required
	UID types.UID `json:"uid"`
}

// Assignment is one address given to one Service.
type Assignment struct {
	// address is the assigned IPv4 address.
	// +required
	// +kubebuilder:validation:MaxLength=15
	Address string `json:"address"`
	// service holds the address.
	// +required
	Service ServiceRef `json:"service"`
	// sharingKey is the Service's lb.converge.dev/allow-shared-ip value. A
	// Service with a longer one gets no address (SharingKeyTooLong).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SharingKey string `json:"sharingKey,omitempty"`
	// ports the Service uses on the address, as PROTOCOL/port. A Service
	// with more ports than this list may hold gets no address
	// (TooManyPorts).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=16
	Ports []string `json:"ports,omitempty"`
}

// IPAddressPoolStatus is the pool's usage. The assignments are the source
// of truth of the allocator: an address is written here (with an optimistic
// lock) before any Service is told about it.
type IPAddressPoolStatus struct {
	// assigned is the number of distinct addresses in use.
	// +optional
	Assigned int32 `json:"assigned,omitempty"`
	// available is the number of addresses still free.
	// +optional
	Available int64 `json:"available,omitempty"`
	// assignments lists every Service holding an address of the pool, at
	// most the manager's --lb-max-assignments-per-pool (a Service past it
	// gets no address: AssignmentLimitExceeded).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=65536
	Assignments []Assignment `json:"assignments,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready (False with PoolExhausted when full).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipp,categories={converge,lb}
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.spec.addresses`
// +kubebuilder:printcolumn:name="Assigned",type=integer,JSONPath=`.status.assigned`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.available`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// IPAddressPool is a set of addresses Services of type LoadBalancer are
// given virtual IPs from.
type IPAddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the pool's addresses and grants.
	// +required
	Spec IPAddressPoolSpec `json:"spec"`
	// status is the pool's usage.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status IPAddressPoolStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// IPAddressPoolList is a list of IPAddressPools.
type IPAddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAddressPool `json:"items"`
}

// AutoAssigns reports whether the pool serves Services that name no pool.
func (p *IPAddressPool) AutoAssigns() bool {
	return p.Spec.AutoAssign == nil || *p.Spec.AutoAssign
}
