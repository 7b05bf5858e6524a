package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestWaitForHealthWithCEL: with wait and a CEL health check for a custom
// kind, the Sync stays Reconciling (WaitingForHealth) until the object's
// status says it is healthy, then is Ready and Healthy.
func TestWaitForHealthWithCEL(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	grantCRDs(t, ns, "test.converge.dev")
	_, h1, _ := setupRepo(t, ns, map[string]string{
		"app/gadget-crd.yaml": gadgetCRD,
		"app/gadget.yaml":     "apiVersion: test.converge.dev/v1\nkind: Gadget\nmetadata:\n  name: g\nspec:\n  size: 1\n",
	})
	sy := newSync(ns, "app", "app", "app", true)
	sy.Spec.Wait = true
	sy.Spec.HealthChecks = []gitopsv1alpha1.HealthCheck{{APIVersion: "test.converge.dev/v1", Kind: "Gadget",
		Current: `has(self.status) && self.status.ready == true`}}
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.WaitingForHealthReason, "Gadget.test.converge.dev/"+ns+"/g")
	g.Expect(c.Message).To(ContainSubstring("not yet"))
	s := getSync(g, t, ns, "app")
	g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.ReconcilingCondition)).To(BeTrue())

	u := &unstructured.Unstructured{}
	u.SetAPIVersion("test.converge.dev/v1")
	u.SetKind("Gadget")
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "g"}, u)).To(Succeed())
	g.Expect(unstructured.SetNestedField(u.Object, true, "status", "ready")).To(Succeed())
	g.Expect(env.Client.Update(t.Context(), u, client.FieldOwner("gadget-controller"))).To(Succeed())
	s = waitApplied(t, g, ns, "app", h1)
	g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.HealthyCondition)).To(BeTrue())
}

const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.test.converge.dev
spec:
  group: test.converge.dev
  names: {kind: Gadget, plural: gadgets, singular: gadget, listKind: GadgetList}
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
