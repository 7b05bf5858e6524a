package placement

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// TestNamespace is the rule as a table: own namespace kept; targetNamespace,
// else the Sync's, for namespaced kinds; cluster-scoped kinds stay; an
// unknown kind is ErrUnknownKind.
func TestNamespace(t *testing.T) {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Cluster"}, meta.RESTScopeRoot)
	obj := func(apiVersion, kind, ns string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetName("x")
		u.SetNamespace(ns)
		return u
	}
	sync := func(target string) *gitopsv1alpha1.Sync {
		return &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant"}, Spec: gitopsv1alpha1.SyncSpec{TargetNamespace: target}}
	}
	for _, tt := range []struct {
		name   string
		u      *unstructured.Unstructured
		target string
		want   string
	}{
		{"own namespace kept", obj("v1", "ConfigMap", "elsewhere"), "target", "elsewhere"},
		{"no namespace, no target: the Sync's", obj("v1", "ConfigMap", ""), "", "tenant"},
		{"no namespace: targetNamespace", obj("v1", "ConfigMap", ""), "target", "target"},
		{"cluster-scoped custom kind stays", obj("example.com/v1", "Cluster", ""), "target", ""},
		{"well-known cluster-scoped stays", obj("v1", "Namespace", ""), "target", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Namespace(m, sync(tt.target), tt.u)
			if err != nil || got != tt.want {
				t.Errorf("Namespace = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	_, err := Namespace(m, sync(""), obj("example.com/v1", "Widget", ""))
	if !errors.Is(err, ErrUnknownKind) {
		t.Errorf("unknown kind: err = %v, want ErrUnknownKind", err)
	}
}

// TestNamespaceOfAKindDefinedInTheSameRender: a kind the API server does not
// serve yet takes the scope its CRD in the render declares — namespaced
// kinds go where namespaced kinds go, cluster-scoped ones stay — and a kind
// no CRD defines is still ErrUnknownKind.
func TestNamespaceOfAKindDefinedInTheSameRender(t *testing.T) {
	m := meta.NewDefaultRESTMapper(nil)
	crd := func(kind, scope string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"spec": map[string]any{"group": "example.com", "names": map[string]any{"kind": kind}}}}
		if scope != "" {
			_ = unstructured.SetNestedField(u.Object, scope, "spec", "scope")
		}
		return u
	}
	obj := func(kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("example.com/v1")
		u.SetKind(kind)
		u.SetName("x")
		return u
	}
	scopes := CRDScopes([]*unstructured.Unstructured{crd("Gadget", "Namespaced"), crd("Fleet", "Cluster"), crd("Thing", ""), obj("Gadget")})
	sy := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant"}}
	for kind, want := range map[string]string{"Gadget": "tenant", "Fleet": "", "Thing": "tenant"} {
		got, err := NamespaceIn(m, scopes, sy, obj(kind))
		if err != nil || got != want {
			t.Errorf("%s: NamespaceIn = %q, %v; want %q", kind, got, err, want)
		}
	}
	if _, err := NamespaceIn(m, scopes, sy, obj("Widget")); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("kind no CRD defines: err = %v, want ErrUnknownKind", err)
	}
}
