// Package contract holds what every Converge contract shares: the label a
// CustomResourceDefinition carries to declare that its kind honours a
// contract, and the check, answered from the manager's cache, that a kind a
// tenant names in a reference (a Machine's infrastructureRef, a Database's
// instanceRef, a Certificate's issuerRef) declares it. A reference never
// resolves to a kind that does not: not a core kind (v1 Node, Secret), not a
// cluster-scoped kind, not a CRD without the label. The subpackages are the
// contracts' fields.
package contract

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelPrefix starts every contract label: a CRD carrying
// contract.converge.dev/<contract>: v1alpha1 declares that its kind honours
// <contract> at that version.
const LabelPrefix = "contract.converge.dev/"

// Version is the contracts' version, the label's value.
const Version = "v1alpha1"

// The contracts.
const (
	// InfrastructureMachine: a Machine's spec.infrastructureRef
	// (pkg/contract/infrastructuremachine).
	InfrastructureMachine = "infrastructure-machine"
	// DatabaseInstance: a Database's spec.instanceRef
	// (pkg/contract/databaseinstance).
	DatabaseInstance = "database-instance"
	// Issuer: a Certificate's spec.issuerRef of another group
	// (pkg/contract/issuer).
	Issuer = "issuer"
)

// Label is the label key declaring contract c.
func Label(c string) string { return LabelPrefix + c }

// crdGVK is the kind the check reads, metadata only.
var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// NotDeclaredError says a kind does not declare a contract; the message
// says why (core kind, cluster-scoped, no label, not served).
type NotDeclaredError struct {
	GVK      schema.GroupVersionKind
	Contract string
	Why      string
}

func (e *NotDeclaredError) Error() string {
	return fmt.Sprintf("%s does not declare the %s contract: %s", e.GVK.GroupKind(), e.Contract, e.Why)
}

// IsNotDeclared reports whether err is a *NotDeclaredError.
func IsNotDeclared(err error) bool {
	var nd *NotDeclaredError
	return errors.As(err, &nd)
}

// Checker decides whether a kind declares a contract. Reader must be the
// manager's cache (it reads CustomResourceDefinitions as
// metav1.PartialObjectMetadata, so one metadata-only informer serves every
// check), and Mapper the manager's REST mapper: the mapper is asked only
// about a kind whose group has a labelled CRD, so a kind of an unknown
// group costs no discovery request.
type Checker struct {
	Reader client.Reader
	Mapper meta.RESTMapper
}

// Check returns nil when gvk is a namespaced kind served by a CRD labelled
// Label(c) = Version, a *NotDeclaredError when it is not, and another error
// when the cache or the mapper failed.
func (k Checker) Check(ctx context.Context, gvk schema.GroupVersionKind, c string) error {
	nd := func(why string) error { return &NotDeclaredError{GVK: gvk, Contract: c, Why: why} }
	if gvk.Group == "" || !strings.Contains(gvk.Group, ".") {
		return nd("it is a built-in kind, not a CustomResourceDefinition's")
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(crdGVK.GroupVersion().WithKind(crdGVK.Kind + "List"))
	if err := k.Reader.List(ctx, list, client.MatchingLabels{Label(c): Version}); err != nil {
		return fmt.Errorf("listing CustomResourceDefinitions labelled %s: %w", Label(c), err)
	}
	labelled := false
	for i := range list.Items {
		if strings.HasSuffix(list.Items[i].Name, "."+gvk.Group) {
			labelled = true
			break
		}
	}
	if !labelled {
		return nd(fmt.Sprintf("no CustomResourceDefinition of group %s carries the label %s=%s", gvk.Group, Label(c), Version))
	}
	mapping, err := k.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nd("the API server does not serve it")
		}
		return fmt.Errorf("looking up %s: %w", gvk, err)
	}
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdGVK)
	if err := k.Reader.Get(ctx, client.ObjectKey{Name: mapping.Resource.Resource + "." + gvk.Group}, crd); err != nil {
		if apierrors.IsNotFound(err) {
			return nd("it is not served by a CustomResourceDefinition")
		}
		return fmt.Errorf("reading the CustomResourceDefinition of %s: %w", gvk, err)
	}
	if crd.Labels[Label(c)] != Version {
		return nd(fmt.Sprintf("its CustomResourceDefinition %s does not carry the label %s=%s", crd.Name, Label(c), Version))
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return nd("it is cluster-scoped; a reference resolves only in its own namespace")
	}
	return nil
}
