package sync_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
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

// TestKindOfItsOwnCRDIsRecordedInItsNamespace: an object of a namespaced
// kind whose CRD comes in the same revision is written ahead into the
// inventory in the namespace it is applied in, never as a cluster-scoped
// entry. Such an entry could not exist, and pruning it meant reading it at
// cluster scope, which the tenant may not: ReadForbidden, and the Sync held.
func TestKindOfItsOwnCRDIsRecordedInItsNamespace(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	const group = "inventory.converge.dev"
	grantCRDs(t, ns, group)
	_, h1, _ := setupRepo(t, ns, map[string]string{
		"app/gadget-crd.yaml": strings.ReplaceAll(gadgetCRD, "test.converge.dev", group),
		"app/gadget.yaml":     "apiVersion: " + group + "/v1\nkind: Gadget\nmetadata:\n  name: g\n",
	})
	sy := newSync(ns, "app", "app", "app", true)
	// Every inventory the Sync ever records, as the API server stores it.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(t.Context(), &gitopsv1alpha1.SyncList{}, client.InNamespace(ns))
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	s := waitApplied(t, g, ns, "app", h1)
	g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)).To(BeTrue())
	// Read the watch up to the state waitApplied saw: every earlier write
	// comes before it.
	deadline := time.After(time.Minute)
	for seen := false; !seen; {
		select {
		case ev, ok := <-w.ResultChan():
			g.Expect(ok).To(BeTrue(), "watch closed before resourceVersion %s", s.ResourceVersion)
			o, isSync := ev.Object.(*gitopsv1alpha1.Sync)
			if !isSync {
				continue
			}
			for _, ref := range o.Status.Inventory {
				if ref.Kind == "Gadget" {
					g.Expect(ref.Namespace).To(Equal(ns), "inventory entry %+v (resourceVersion %s)", ref, o.ResourceVersion)
				}
			}
			seen = o.ResourceVersion == s.ResourceVersion
		case <-deadline:
			t.Fatalf("the watch never showed resourceVersion %s", s.ResourceVersion)
		}
	}
	g.Expect(inventoryNames(s)).To(HaveLen(2))
}
