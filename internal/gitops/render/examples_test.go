package render

import (
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestExamplesRender keeps examples/quick-tour (the README quick tour)
// renderable.
func TestExamplesRender(t *testing.T) {
	g := NewWithT(t)
	objs, err := Render(t.Context(), filepath.Join("..", "..", ".."), "examples/quick-tour", Options{})
	g.Expect(err).NotTo(HaveOccurred())
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	g.Expect(kinds).To(ConsistOf("Namespace//quick-tour", "ConfigMap/quick-tour/web-config",
		"Deployment/quick-tour/web", "Service/quick-tour/web"))
}
