// Package v1alpha1 contains the backup.converge.dev/v1alpha1 API: the
// DatabaseBackup kind, the record of a dump taken by the backup-before-delete
// controller, which a new Database can restore from.
//
// +kubebuilder:object:generate=true
// +groupName=backup.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "backup.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &DatabaseBackup{}, &DatabaseBackupList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
