// Package v1alpha1 contains the upgrade.converge.dev/v1alpha1 API: the
// MachineUpgrade, a resumable state machine that rolls a set of Machines to
// a new image and version through their BMCs (cordon, drain, set the image,
// power cycle over Redfish, wait for the machine to come back, uncordon,
// check), checkpointing every step in its status.
//
// +kubebuilder:object:generate=true
// +groupName=upgrade.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "upgrade.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &MachineUpgrade{}, &MachineUpgradeList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
