// Package v1alpha1 contains the gitops.converge.dev/v1alpha1 API: the
// GitRepository kind, which fetches a git revision, and the Sync kind, which
// applies a path of that revision to the cluster with server-side apply,
// corrects drift and prunes what was removed from git.
//
// +kubebuilder:object:generate=true
// +groupName=gitops.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "gitops.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&GitRepository{}, &GitRepositoryList{},
		&Sync{}, &SyncList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
