package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Protocol is a protocol a BMC serves.
// +kubebuilder:validation:Enum=IPMI;Redfish
type Protocol string

// Protocols.
const (
	// ProtocolIPMI is IPMI v2.0 over LAN (RMCP+, UDP).
	ProtocolIPMI Protocol = "IPMI"
	// ProtocolRedfish is DMTF Redfish over HTTPS.
	ProtocolRedfish Protocol = "Redfish"
)

// ServiceType says how a BMC is exposed.
// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
type ServiceType string

// Service types.
const (
	ServiceClusterIP    ServiceType = "ClusterIP"
	ServiceNodePort     ServiceType = "NodePort"
	ServiceLoadBalancer ServiceType = "LoadBalancer"
)

// LocalObjectReference names an object in the MachineBMC's namespace.
// There is no namespace field: a MachineBMC never reaches into another
// namespace.
type LocalObjectReference struct {
	// name is the object's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ServiceSpec says how the BMC's endpoints are exposed.
type ServiceSpec struct {
	// type is ClusterIP (default), NodePort or LoadBalancer. A manager in
	// a cluster (--bmc-expose=Service) publishes the BMC through a Service
	// of this type named bmc-<name>; NodePort and LoadBalancer need the
	// right to create Services in the namespace. In local mode (`converge
	// up`) the BMC's own address and ports are published whatever the
	// type. See docs/bmc.md.
	// +optional
	Type ServiceType `json:"type,omitempty"`
}

// MachineBMCSpec is the desired state of a MachineBMC.
type MachineBMCSpec struct {
	// machineRef names the Machine, in this namespace, the BMC controls.
	// Immutable.
	// +required
	MachineRef LocalObjectReference `json:"machineRef"`

	// authSecretRef names a Secret in this namespace holding the BMC
	// user's `username` (at most 16 bytes) and `password` (at most 20
	// bytes). A change of the Secret takes effect at the next session.
	// +required
	AuthSecretRef LocalObjectReference `json:"authSecretRef"`

	// service says how the endpoints are exposed.
	// +optional
	Service ServiceSpec `json:"service,omitempty"`

	// protocols lists the protocols served; both when empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	Protocols []Protocol `json:"protocols,omitempty"`
}

// MachineBMCStatus is the observed state of a MachineBMC.
type MachineBMCStatus struct {
	// ipmiEndpoint is the host:port (UDP) IPMI clients reach.
	// +optional
	// +kubebuilder:validation:MaxLength=263
	IPMIEndpoint string `json:"ipmiEndpoint,omitempty"`

	// redfishEndpoint is the Redfish service's base URL.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	RedfishEndpoint string `json:"redfishEndpoint,omitempty"`

	// redfishCABundle is the PEM certificate of the CA that issued the
	// Redfish endpoint's certificate (which names the endpoint's host), for
	// clients to verify it with (curl --cacert). It is a copy for
	// convenience: the trust anchor is the CA Secret in the manager's
	// namespace, which the manager's own clients read.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	RedfishCABundle string `json:"redfishCABundle,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, MachineAvailable, SecretAvailable.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mbmc,categories=converge;bmc
// +kubebuilder:printcolumn:name="Machine",type=string,JSONPath=`.spec.machineRef.name`
// +kubebuilder:printcolumn:name="IPMI",type=string,JSONPath=`.status.ipmiEndpoint`
// +kubebuilder:printcolumn:name="Redfish",type=string,JSONPath=`.status.redfishEndpoint`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// MachineBMC is a virtual BMC for one Machine: IPMI and Redfish clients
// power it on and off, set its boot device and insert virtual media, and
// each accepted command becomes a write to the Machine's spec.
type MachineBMC struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec MachineBMCSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status MachineBMCStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MachineBMCList is a list of MachineBMCs.
type MachineBMCList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the MachineBMCs.
	Items []MachineBMC `json:"items"`
}

// Serves reports whether the BMC serves p (both protocols when
// spec.protocols is empty).
func (b *MachineBMC) Serves(p Protocol) bool {
	if len(b.Spec.Protocols) == 0 {
		return true
	}
	for _, q := range b.Spec.Protocols {
		if q == p {
			return true
		}
	}
	return false
}
