package sync_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestStoredInvalidSpecIsStalled: objects the webhook would refuse can still
// be stored (written before a rule existed, or while the webhook was down).
// The controllers validate again and stop with InvalidSpec naming the field,
// acting on nothing; fixing the spec recovers. The webhook is skipped here
// for labelled objects only (testenv.SkipValidationForLabelled).
func TestStoredInvalidSpecIsStalled(t *testing.T) {
	testenv.Need(t, env)
	env.SkipValidationForLabelled(t)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	_, h1, _ := setupRepo(t, ns, map[string]string{"app/a.yaml": configMap("a", nil)})
	skip := map[string]string{testenv.NoValidationLabel: "true"}

	s := newSync(ns, "escape", "app", "../../outside", true)
	s.Labels = skip
	repo := gitRepository(ns, "two-refs", "file:///nonexistent/repo.git")
	repo.Spec.Ref = &gitopsv1alpha1.GitRepositoryRef{Branch: "main", Tag: "v1"}
	repo.Labels = skip
	// The API server reloads webhook configurations asynchronously.
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Create(ctx, s.DeepCopy())).To(Succeed())
	}).Should(Succeed())
	g.Expect(env.Client.Create(ctx, repo)).To(Succeed())

	stalled := func(obj client.Object, conds func() []metav1.Condition, field string) {
		testenv.Eventually(g, func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			r := meta.FindStatusCondition(conds(), gitopsv1alpha1.ReadyCondition)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(r.Reason).To(Equal(gitopsv1alpha1.InvalidSpecReason), r.Message)
			g.Expect(r.Message).To(ContainSubstring(field))
			st := meta.FindStatusCondition(conds(), gitopsv1alpha1.StalledCondition)
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
	}
	got := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "escape"}}
	stalled(got, func() []metav1.Condition { return got.Status.Conditions }, "spec.path")
	stalled(repo, func() []metav1.Condition { return repo.Status.Conditions }, "spec.ref")
	g.Consistently(func() error {
		_, err := getCM(t, ns, "a")
		return err
	}).WithTimeout(time.Second).ShouldNot(Succeed(), "an invalid Sync applies nothing")

	base := got.DeepCopy()
	got.Spec.Path = "app"
	g.Expect(env.Client.Patch(ctx, got, client.MergeFrom(base))).To(Succeed())
	waitApplied(t, g, ns, "escape", h1)
	_, err := getCM(t, ns, "a")
	g.Expect(err).NotTo(HaveOccurred())
}
