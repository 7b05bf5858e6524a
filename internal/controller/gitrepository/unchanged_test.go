package gitrepository_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/gitrepository"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/useragent"
)

// TestUnchangedRepositoryWritesNoStatus: reconciling a Ready GitRepository
// whose branch did not move sends no status write.
func TestUnchangedRepositoryWritesNoStatus(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "r")
	repo.Commit(t, "first", map[string]string{"a.yaml": "a: 1\n"})
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quiet"},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: srv.ServeDaemon(t) + "r.git"}}
	g.Expect(env.Client.Create(t.Context(), gr)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		got := get(g, t, gr)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, gitopsv1alpha1.ReadyCondition)).To(BeTrue())
	}).Should(Succeed())

	writes, reconciles := env.UnchangedReconciles(t, g, gitrepository.ControllerName, "gitrepositories", gr, 3)
	t.Logf("GitRepository at rest: %.0f status writes in %.0f reconciles", writes, reconciles)
	g.Expect(reconciles).To(BeNumerically(">=", 3))
	// Exact for this object (the API server's count is for the whole
	// resource, and objects of earlier tests may still be written): its
	// resourceVersion is the one the last annotation patch returned.
	rv := gr.ResourceVersion
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(gr), gr)).To(Succeed())
	g.Expect(gr.ResourceVersion).To(Equal(rv), "the GitRepository was written after the last annotation (%.0f status writes of the resource in the window)", writes)
}

// TestStatusWriteNamesController: the status the kit's StatusPatcher writes
// is owned, in managedFields, by the controller's field manager
// (useragent.FieldOwner) and by no other manager. The API server's default
// manager (the User-Agent's prefix, converge-<name> as well) gives the same
// name, so this fails when a status write goes out under another client or
// manager name, not when only the explicit field owner is dropped.
func TestStatusWriteNamesController(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "r")
	repo.Commit(t, "first", map[string]string{"a.yaml": "a: 1\n"})
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owned"},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: srv.ServeDaemon(t) + "r.git"}}
	g.Expect(env.Client.Create(t.Context(), gr)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		got := get(g, t, gr)
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, gitopsv1alpha1.ReadyCondition)).To(BeTrue())
		var managers []string
		for _, f := range got.ManagedFields {
			if f.Subresource == "status" {
				managers = append(managers, f.Manager)
			}
		}
		g.Expect(managers).To(ConsistOf(useragent.FieldOwner(gitrepository.ControllerName)))
	}).Should(Succeed())
}
