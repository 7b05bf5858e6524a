// Package v1alpha1 contains the infrastructure.converge.dev/v1alpha1 API:
// the built-in machine providers, QemuMachine (a real QEMU virtual machine)
// and KwokMachine (a Node served by kwok). Both honour the
// infrastructure-machine contract (docs/contracts/infrastructure-machine.md),
// so a Machine can use either without knowing its Go types.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "infrastructure.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&QemuMachine{}, &QemuMachineList{},
		&KwokMachine{}, &KwokMachineList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
