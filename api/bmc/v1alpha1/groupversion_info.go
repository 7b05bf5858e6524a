// Package v1alpha1 contains the bmc.converge.dev/v1alpha1 API: the
// MachineBMC, a virtual baseboard management controller that answers IPMI
// v2.0 (RMCP+) and Redfish clients for one Machine and translates each
// accepted command into a write to the Machine's spec.
//
// +kubebuilder:object:generate=true
// +groupName=bmc.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "bmc.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &MachineBMC{}, &MachineBMCList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
