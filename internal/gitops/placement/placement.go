// Package placement holds the one rule that decides the namespace a Sync
// applies an object in, shared by the Sync controller and `converge diff
// sync` so that the preview and the apply never disagree:
//
//   - an object that names its namespace keeps it;
//   - a namespaced object without one goes to the Sync's
//     spec.targetNamespace when set, else to the Sync's own namespace (never
//     to "default": a tenant's objects land in the tenant's namespace);
//   - a cluster-scoped object stays cluster-scoped;
//   - a kind the API server does not serve yet but a CustomResourceDefinition
//     of the same render defines takes the scope that CRD declares
//     (NamespaceIn);
//   - any other kind the API server does not serve is an error wrapping
//     ErrUnknownKind.
package placement

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// ErrUnknownKind is wrapped by Namespace's error for a kind the API server
// does not serve.
var ErrUnknownKind = errors.New("kind not served by the API server")

// Scopes maps each kind defined by a CustomResourceDefinition of a render
// to whether that CRD makes it namespaced.
type Scopes map[schema.GroupKind]bool

// CRDScopes collects the Scopes the CustomResourceDefinitions among objs
// declare (a CRD without spec.scope is namespaced, as the API server
// would refuse it otherwise anyway).
func CRDScopes(objs []*unstructured.Unstructured) Scopes {
	var s Scopes
	for _, u := range objs {
		if u.GroupVersionKind().GroupKind() != crdKind {
			continue
		}
		g, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		k, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
		if s == nil {
			s = Scopes{}
		}
		s[schema.GroupKind{Group: g, Kind: k}] = scope != "Cluster"
	}
	return s
}

var crdKind = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}

// Namespace returns the namespace sy applies u in (see the package
// comment). m resolves the kind's scope.
func Namespace(m meta.RESTMapper, sy *gitopsv1alpha1.Sync, u *unstructured.Unstructured) (string, error) {
	return NamespaceIn(m, nil, sy, u)
}

// NamespaceIn is Namespace for an object of a render whose CRDs declared
// defined: a kind the API server does not serve yet takes its scope from
// there. Without it, an object of a kind whose CRD comes in the same
// revision would be placed (and recorded in the inventory) as if it were
// cluster-scoped until the CRD is served, and later read at cluster scope,
// where a tenant may not read it.
func NamespaceIn(m meta.RESTMapper, defined Scopes, sy *gitopsv1alpha1.Sync, u *unstructured.Unstructured) (string, error) {
	if ns := u.GetNamespace(); ns != "" {
		return ns, nil
	}
	if ClusterScopedWellKnown(u) {
		return "", nil
	}
	gvk := u.GroupVersionKind()
	rm, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case meta.IsNoMatchError(err):
		namespaced, ok := defined[gvk.GroupKind()]
		if !ok {
			return "", fmt.Errorf("%w: %s (apiVersion %s)", ErrUnknownKind, gvk.Kind, gvk.GroupVersion())
		}
		if !namespaced {
			return "", nil
		}
	case err != nil:
		return "", fmt.Errorf("mapping %s: %w", gvk, err)
	case rm.Scope.Name() == meta.RESTScopeNameRoot:
		return "", nil
	}
	switch {
	case sy.Spec.TargetNamespace != "":
		return sy.Spec.TargetNamespace, nil
	default:
		return sy.Namespace, nil
	}
}

// ClusterScopedWellKnown reports whether u is of a built-in cluster-scoped
// kind that needs no lookup.
func ClusterScopedWellKnown(u *unstructured.Unstructured) bool {
	switch u.GroupVersionKind().GroupKind().String() {
	case "Namespace", "CustomResourceDefinition.apiextensions.k8s.io", "ClusterRole.rbac.authorization.k8s.io",
		"ClusterRoleBinding.rbac.authorization.k8s.io", "PersistentVolume", "StorageClass.storage.k8s.io":
		return true
	}
	return false
}
