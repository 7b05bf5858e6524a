package render

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestLocate names the file an object comes from: the manifest file holding
// it, the kustomization file for a kustomize build, "" when none matches.
func TestLocate(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{
		"app/a.yaml":           "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
		"app/sub/w.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
		"k/kustomization.yaml": "resources: [w.yaml]\n",
		"k/w.yaml":             "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
	})
	widget := func(u *unstructured.Unstructured) bool { return u.GetKind() == "Widget" && u.GetName() == "w" }
	for _, tt := range []struct{ path, want string }{
		{"app", "app/sub/w.yaml"},
		{"k", "k/kustomization.yaml"},
	} {
		got, err := Locate(t.Context(), root, tt.path, Options{}, widget)
		if err != nil || got != tt.want {
			t.Errorf("Locate(%s) = %q, %v; want %q", tt.path, got, err, tt.want)
		}
	}
	got, err := Locate(t.Context(), root, "app", Options{}, func(*unstructured.Unstructured) bool { return false })
	if err != nil || got != "" {
		t.Errorf("Locate(no match) = %q, %v; want \"\"", got, err)
	}
}
