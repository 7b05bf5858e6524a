package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// L2AdvertisementSpec says which pools are announced in L2 mode, from which
// nodes and on which interfaces.
type L2AdvertisementSpec struct {
	// ipAddressPools are announced; empty means every pool.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	IPAddressPools []string `json:"ipAddressPools,omitempty"`

	// nodeSelectors limit the nodes that may answer ARP; empty means every
	// node running the agent.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// interfaces the address is announced on; empty means the agent's
	// --interface.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=15
	Interfaces []string `json:"interfaces,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=l2adv,categories={converge,lb}
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="Interfaces",type=string,JSONPath=`.spec.interfaces`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// L2Advertisement makes agents answer ARP for the addresses of pools.
type L2Advertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec selects pools, nodes and interfaces.
	// +optional
	Spec L2AdvertisementSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// L2AdvertisementList is a list of L2Advertisements.
type L2AdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []L2Advertisement `json:"items"`
}
