// Package v1alpha1 contains the workloads.converge.dev/v1alpha1 API: the
// BasicDeployment and BasicReplicaSet kinds that demonstrate the
// parent-child reconciliation pattern on ordinary Pods.
//
// +kubebuilder:object:generate=true
// +groupName=workloads.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "workloads.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&BasicReplicaSet{}, &BasicReplicaSetList{},
		&BasicDeployment{}, &BasicDeploymentList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
