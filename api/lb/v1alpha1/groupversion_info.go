// Package v1alpha1 contains the lb.converge.dev/v1alpha1 API: address pools
// (IPAddressPool) that Services of type LoadBalancer draw their virtual IPs
// from, and L2Advertisements saying which nodes may answer ARP for them.
// Services themselves use the standard core/v1 API (type LoadBalancer,
// loadBalancerClass, status.loadBalancer.ingress, status.conditions) plus
// the annotations declared here. See docs/loadbalancer.md.
//
// +kubebuilder:object:generate=true
// +groupName=lb.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "lb.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&IPAddressPool{}, &IPAddressPoolList{},
		&L2Advertisement{}, &L2AdvertisementList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
