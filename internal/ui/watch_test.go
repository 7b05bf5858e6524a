package ui

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestOnlyEventsAboutTheGraphAreChanges: on a watch of Events, an Event is
// a change only when its involvedObject is an object of the graph; on any
// other watch every object is.
func TestOnlyEventsAboutTheGraphAreChanges(t *testing.T) {
	w := &watcher{}
	ev := func(apiVersion, kind, ns, name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"involvedObject": map[string]any{
			"apiVersion": apiVersion, "kind": kind, "namespace": ns, "name": name}}}
	}
	events := scope{gvk: eventGVK, ns: "shop"}
	if w.relevant(events, ev("pki.converge.dev/v1alpha1", "Issuer", "shop", "ca")) {
		t.Error("an Event is a change before the graph is known")
	}
	w.setAbout(map[string]bool{"pki.converge.dev/Issuer/shop/ca": true, "/Secret/shop/ca-key-pair": true})
	for _, c := range []struct {
		obj  *unstructured.Unstructured
		want bool
	}{
		{ev("pki.converge.dev/v1alpha1", "Issuer", "shop", "ca"), true},
		{ev("v1", "Secret", "shop", "ca-key-pair"), true},
		{ev("pki.converge.dev/v1alpha1", "Issuer", "shop", "other"), false},
		{ev("pki.converge.dev/v1alpha1", "Certificate", "shop", "ca"), false},
		{ev("v1", "Pod", "shop", "web-1"), false},
	} {
		if got := w.relevant(events, c.obj); got != c.want {
			t.Errorf("Event about %v: relevant=%v, want %v", c.obj.Object["involvedObject"], got, c.want)
		}
	}
	issuers := scope{gvk: schema.GroupVersionKind{Group: "pki.converge.dev", Version: "v1alpha1", Kind: "Issuer"}, ns: "shop"}
	if !w.relevant(issuers, &unstructured.Unstructured{Object: map[string]any{}}) {
		t.Error("a change of a watched kind is not a change")
	}
}
