// Package v1alpha1 contains the machine.converge.dev/v1alpha1 API: the
// generic Machine, which says what a machine should be (powered on or off,
// which boot device, which image, which networks) and is made real by any
// provider kind that honours the infrastructure-machine contract (see
// docs/contracts/infrastructure-machine.md).
//
// +kubebuilder:object:generate=true
// +groupName=machine.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "machine.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Machine{}, &MachineList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
