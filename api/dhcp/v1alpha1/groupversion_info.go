// Package v1alpha1 contains the dhcp.converge.dev/v1alpha1 API: address
// pools for machine networks (IPPool), whose status records every
// allocation, and per-machine network configuration (MachineNetworkConfig)
// naming the MAC addresses that draw from them. The DHCP agent answers only
// for allocations recorded here. See docs/dhcp.md.
//
// +kubebuilder:object:generate=true
// +groupName=dhcp.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "dhcp.converge.dev", Version: "v1alpha1"}
	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&IPPool{}, &IPPoolList{},
		&MachineNetworkConfig{}, &MachineNetworkConfigList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
