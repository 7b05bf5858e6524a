package sync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestSourceNotReady: a Sync whose GitRepository does not exist yet is
// Ready=False SourceNotReady naming it, applies nothing, and applies as soon
// as the source is there.
func TestSourceNotReady(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	sy := newSync(ns, "app", "later", "app", true)
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.SourceNotReadyReason, "GitRepository "+ns+"/later not found")
	s := getSync(g, t, ns, "app")
	r := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReconcilingCondition)
	g.Expect(r).NotTo(BeNil(), "a missing source is retried, not stalled")
	g.Expect(r.Reason).To(Equal(gitopsv1alpha1.SourceNotReadyReason))
	g.Expect(meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.StalledCondition)).To(BeNil())
	g.Expect(s.Status.Inventory).To(BeEmpty())
	t.Logf("Ready: %s: %s", c.Reason, c.Message)

	repo := gittest.NewServer(t).NewRepo(t, "later")
	h1 := repo.Commit(t, "initial", map[string]string{"app/a.yaml": configMap("a", map[string]string{"k": "v"})})
	g.Expect(env.Client.Create(t.Context(), gitRepository(ns, "later", repo.FileURL()))).To(Succeed())
	waitApplied(t, g, ns, "app", h1)
	expectCM(t, g, ns, "a", map[string]string{"k": "v"})
}

// TestPruneRefusedIsPruneFailed: when the API server refuses to delete an
// object the new revision no longer has (here a ValidatingAdmissionPolicy,
// as a cluster admin's policy would), the Sync is Ready=False PruneFailed
// with the server's message, keeps the object in its inventory, and prunes
// it once the refusal is lifted. The same refusal while the Sync itself is
// deleted keeps the Sync (and its finalizer) with Ready=False Deleting
// carrying the message, until the refusal is lifted.
func TestPruneRefusedIsPruneFailed(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	repo, h1, _ := setupRepo(t, ns, map[string]string{
		"app/a.yaml": configMap("a", map[string]string{"k": "1"}),
		"app/b.yaml": configMap("b", nil),
	})
	sy := newSync(ns, "app", "app", "app", true)
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	waitApplied(t, g, ns, "app", h1)

	probe := func(name string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.DryRunAll)
		}
	}
	msg, allow := env.Refuse(t, testenv.Refusal{Namespace: ns, Resource: "configmaps",
		Operation: admissionregistrationv1.Delete, Names: []string{"b"}}, probe("b"))

	repo.Delete(t, "drop b", "app/b.yaml")
	h2 := repo.Commit(t, "a=2", map[string]string{"app/a.yaml": configMap("a", map[string]string{"k": "2"})})
	requestReconcile(t, &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.PruneFailedReason, h2, msg, "ConfigMap")
	t.Logf("Ready: %s: %s", c.Reason, c.Message)
	s := getSync(g, t, ns, "app")
	g.Expect(inventoryNames(s)).To(ContainElement("ConfigMap/b"), "a refused prune keeps the object in the inventory")
	g.Expect(s.Status.LastAppliedRevision).NotTo(HaveSuffix(h2), "a revision whose prune failed is not applied")
	_, err := getCM(t, ns, "b")
	g.Expect(err).NotTo(HaveOccurred())
	expectCM(t, g, ns, "a", map[string]string{"k": "2"})

	allow()
	s = waitApplied(t, g, ns, "app", h2)
	g.Expect(inventoryNames(s)).To(Equal([]string{"ConfigMap/a"}))
	expectGone(t, g, ns, "b")

	// Deletion: the prune of a is refused; the Sync stays, saying why.
	msg, allow = env.Refuse(t, testenv.Refusal{Namespace: ns, Resource: "configmaps",
		Operation: admissionregistrationv1.Delete, Names: []string{"a"}}, probe("a"))
	g.Expect(env.Client.Delete(t.Context(), sy)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(g, t, ns, "app")
		c := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(gitopsv1alpha1.DeletingReason))
		g.Expect(c.Message).To(ContainSubstring(msg))
		r := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReconcilingCondition)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Reason).To(Equal(gitopsv1alpha1.PruneFailedReason))
		g.Expect(s.Finalizers).To(ContainElement(gitopsv1alpha1.SyncFinalizer))
	}).Should(Succeed())
	_, err = getCM(t, ns, "a")
	g.Expect(err).NotTo(HaveOccurred())
	allow()
	expectGone(t, g, ns, "a")
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(sy), &gitopsv1alpha1.Sync{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	}).Should(Succeed())
}

// TestHealthCheckFailed: a health check that times out and one whose failed
// expression holds are both Ready=False HealthCheckFailed (and Healthy=False
// HealthCheckFailed), naming the object; the Sync turns Ready once the
// object is healthy.
// failureGroup is the API group of TestHealthCheckFailed's CRD.
const failureGroup = "failure.converge.dev"

func TestHealthCheckFailed(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	// Its own group: the CRD is cluster-scoped, and a CRD another Sync
	// (TestWaitForHealthWithCEL, in parallel) manages would be refused.
	grantCRDs(t, ns, failureGroup)
	_, h1, _ := setupRepo(t, ns, map[string]string{
		"app/gadget-crd.yaml": strings.ReplaceAll(gadgetCRD, "test.converge.dev", failureGroup),
		"app/gadget.yaml":     "apiVersion: " + failureGroup + "/v1\nkind: Gadget\nmetadata:\n  name: g\nspec:\n  size: 1\n",
	})
	sy := newSync(ns, "app", "app", "app", true)
	sy.Spec.Wait = true
	sy.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	sy.Spec.HealthChecks = []gitopsv1alpha1.HealthCheck{{APIVersion: failureGroup + "/v1", Kind: "Gadget",
		Current: `has(self.status) && self.status.phase == "Ready"`,
		Failed:  `has(self.status) && self.status.phase == "Failed"`}}
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	object := "Gadget." + failureGroup + "/" + ns + "/g"

	// Never healthy: the wait times out.
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.HealthCheckFailedReason, "timed out after 5s", object)
	t.Logf("Ready: %s: %s", c.Reason, c.Message)
	healthy := func(g Gomega) *metav1.Condition {
		return meta.FindStatusCondition(getSync(g, t, ns, "app").Status.Conditions, gitopsv1alpha1.HealthyCondition)
	}
	testenv.Eventually(g, func(g Gomega) {
		h := healthy(g)
		g.Expect(h).NotTo(BeNil())
		g.Expect(h.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(h.Reason).To(Equal(gitopsv1alpha1.HealthCheckFailedReason))
	}).Should(Succeed())

	setPhase := func(phase string) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(failureGroup + "/v1")
		u.SetKind("Gadget")
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "g"}, u)).To(Succeed())
		g.Expect(unstructured.SetNestedField(u.Object, phase, "status", "phase")).To(Succeed())
		g.Expect(env.Client.Update(t.Context(), u, client.FieldOwner("gadget-controller"))).To(Succeed())
	}
	// Failed for good: reported as such, not as a timeout.
	setPhase("Failed")
	requestReconcile(t, sy)
	c = waitReason(t, g, ns, "app", gitopsv1alpha1.HealthCheckFailedReason, "failed: "+object)
	g.Expect(c.Message).NotTo(ContainSubstring("timed out"))

	setPhase("Ready")
	requestReconcile(t, sy)
	s := waitApplied(t, g, ns, "app", h1)
	h := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.HealthyCondition)
	g.Expect(h.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(h.Reason).To(Equal(gitopsv1alpha1.SucceededReason))
}
