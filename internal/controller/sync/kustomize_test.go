package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestKustomizeOverGitDaemon: a kustomize overlay served by `git daemon`,
// with a CRD and a custom resource of it in the same revision (CRDs are
// applied and established first).
func TestKustomizeOverGitDaemon(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	grantCRDs(t, ns, "test.converge.dev")
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "kust")
	h := repo.Commit(t, "overlay", map[string]string{
		"base/cm.yaml":                    configMap("cfg", map[string]string{"k": "v"}),
		"base/crd.yaml":                   widgetCRD,
		"base/widget.yaml":                "apiVersion: test.converge.dev/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 1\n",
		"base/kustomization.yaml":         "resources:\n- crd.yaml\n- cm.yaml\n- widget.yaml\n",
		"overlays/dev/kustomization.yaml": "resources:\n- ../../base\nnamePrefix: dev-\nlabels:\n- pairs:\n    env: dev\n",
	})
	url := srv.ServeDaemon(t) + "kust.git"
	g.Expect(env.Client.Create(t.Context(), gitRepository(ns, "kust", url))).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "kust", "overlays/dev", true))).To(Succeed())
	s := waitApplied(t, g, ns, "app", h)
	g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/dev-cfg", "CustomResourceDefinition/widgets.test.converge.dev", "Widget/dev-w"))
	for _, ref := range s.Status.Inventory {
		if ref.Kind == "Widget" {
			// Its CRD came in the same revision: targetNamespace applies.
			g.Expect(ref.Namespace).To(Equal(ns))
		}
	}
	cm, err := getCM(t, ns, "dev-cfg")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Labels).To(HaveKeyWithValue("env", "dev"))
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.converge.dev
spec:
  group: test.converge.dev
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`
