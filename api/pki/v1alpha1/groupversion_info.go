// Package v1alpha1 contains the pki.converge.dev/v1alpha1 API: Issuer and
// ClusterIssuer (selfSigned, ca, acme), Certificate (a key pair kept true and
// fresh in a Secret) and CertificateRequest (one signing attempt, the issuer
// contract). Field names and meanings follow cert-manager.io/v1, so a
// cert-manager manifest converts by changing its apiVersion (see
// docs/certificates.md for the differences that remain).
//
// +kubebuilder:object:generate=true
// +groupName=pki.converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "pki.converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Issuer{}, &IssuerList{},
		&ClusterIssuer{}, &ClusterIssuerList{},
		&Certificate{}, &CertificateList{},
		&CertificateRequest{}, &CertificateRequestList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
