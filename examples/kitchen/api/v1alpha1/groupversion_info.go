// Package v1alpha1 contains the kitchen.example.converge.dev/v1alpha1 API
// of the kitchen example: an Order asks for a number of sets of a meal, and
// the Order controller cooks one Meal per set.
//
// +kubebuilder:object:generate=true
// +groupName=kitchen.example.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "kitchen.example.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Order{}, &OrderList{}, &Meal{}, &MealList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
