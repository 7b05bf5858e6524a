// Package v1alpha1 contains the sql.converge.dev/v1alpha1 API: database
// servers (PostgresInstance, MariaDBInstance) that expose the database
// instance contract in their status, and the engine-agnostic Database kind
// that provisions a database, an owner role and a connection Secret on any
// kind honouring that contract (see docs/contracts/database-instance.md).
//
// +kubebuilder:object:generate=true
// +groupName=sql.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "sql.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&PostgresInstance{}, &PostgresInstanceList{},
		&MariaDBInstance{}, &MariaDBInstanceList{},
		&Database{}, &DatabaseList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
