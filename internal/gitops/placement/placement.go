// Package placement holds the one rule that decides the namespace a Sync
// applies an object in, shared by the Sync controller and `converge diff
// sync` so that the preview and the apply never disagree:
//
//   - an object that names its namespace keeps it;
//   - a namespaced object without one goes to the Sync's
//     spec.targetNamespace when set, else to the Sync's own namespace (never
//     to "default": a tenant's objects land in the tenant's namespace);
//   - a cluster-scoped object stays cluster-scoped;
//   - a kind the API server does not serve is an error wrapping
//     ErrUnknownKind.
package placement

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// ErrUnknownKind is wrapped by Namespace's error for a kind the API server
// does not serve.
var ErrUnknownKind = errors.New("kind not served by the API server")

// Namespace returns the namespace sy applies u in (see the package
// comment). m resolves the kind's scope.
func Namespace(m meta.RESTMapper, sy *gitopsv1alpha1.Sync, u *unstructured.Unstructured) (string, error) {
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
		return "", fmt.Errorf("%w: %s (apiVersion %s)", ErrUnknownKind, gvk.Kind, gvk.GroupVersion())
	case err != nil:
		return "", fmt.Errorf("mapping %s: %w", gvk, err)
	case rm.Scope.Name() == meta.RESTScopeNameRoot:
		return "", nil
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
