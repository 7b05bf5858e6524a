// Package issuerref resolves a Certificate's or CertificateRequest's
// issuerRef to the built-in Issuer or ClusterIssuer, and tells built-in
// references from external issuers' (another group).
package issuerref

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
)

// ClusterIssuerKind and IssuerKind are the built-in issuer kinds.
const (
	IssuerKind        = "Issuer"
	ClusterIssuerKind = "ClusterIssuer"
)

// IsBuiltIn says whether ref names a pki.converge.dev issuer (the group
// empty or pki.converge.dev).
func IsBuiltIn(ref pkiv1alpha1.IssuerReference) bool {
	return ref.Group == "" || ref.Group == pkiv1alpha1.GroupVersion.Group
}

// Kind is ref's kind with the default (Issuer) filled.
func Kind(ref pkiv1alpha1.IssuerReference) string {
	if ref.Kind == "" {
		return IssuerKind
	}
	return ref.Kind
}

// Object is an issuer with its object metadata.
type Object interface {
	client.Object
	pkiv1alpha1.GenericIssuer
}

// Get reads the built-in issuer ref names for an object in namespace ns. It
// returns the API's NotFound error when it does not exist.
func Get(ctx context.Context, c client.Reader, ns string, ref pkiv1alpha1.IssuerReference) (Object, error) {
	var obj Object
	key := types.NamespacedName{Name: ref.Name}
	if Kind(ref) == ClusterIssuerKind {
		obj = &pkiv1alpha1.ClusterIssuer{}
	} else {
		obj = &pkiv1alpha1.Issuer{}
		key.Namespace = ns
	}
	if err := c.Get(ctx, key, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// Ready says whether the issuer is Ready for its current generation.
func Ready(iss Object) (bool, string) {
	c := meta.FindStatusCondition(iss.GetStatus().Conditions, pkiv1alpha1.ReadyCondition)
	if c == nil {
		return false, "the issuer has not been checked yet"
	}
	if c.Status != "True" {
		return false, c.Message
	}
	if c.ObservedGeneration != iss.GetGeneration() {
		return false, "the issuer is being checked after a change"
	}
	return true, ""
}

// SecretNamespace is where the issuer's Secrets (CA, ACME account key) live:
// its own namespace, or for a ClusterIssuer the cluster resource namespace.
func SecretNamespace(iss Object, clusterResourceNamespace string) string {
	if iss.GetNamespace() == "" {
		return clusterResourceNamespace
	}
	return iss.GetNamespace()
}
