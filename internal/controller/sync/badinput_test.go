package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestBadCommitsPruneNothing: a broken YAML commit, an empty commit and a
// commit deleting the path each report a specific reason and delete nothing;
// a good commit afterwards recovers.
func TestBadCommitsPruneNothing(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	repo, h1, gr := setupRepo(t, ns, map[string]string{
		"app/a.yaml": configMap("a", nil),
		"app/b.yaml": configMap("b", nil),
	})
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "app", "app", true))).To(Succeed())
	before := waitApplied(t, g, ns, "app", h1).Status.Inventory

	stillThere := func(g Gomega) {
		for _, n := range []string{"a", "b"} {
			_, err := getCM(t, ns, n)
			g.Expect(err).NotTo(HaveOccurred(), "ConfigMap %s was pruned", n)
		}
		// Never loses track: everything known before is still listed.
		g.Expect(getSync(g, t, ns, "app").Status.Inventory).To(ContainElements(before))
	}

	// Broken YAML: the message names the file and line.
	repo.Commit(t, "broken", map[string]string{"app/b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  labels: [\n"})
	requestReconcile(t, gr)
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.BuildFailedReason)
	g.Expect(c.Message).To(ContainSubstring("app/b.yaml: yaml: line"))
	stillThere(g)

	// Empty render.
	repo.Delete(t, "empty", "app/a.yaml", "app/b.yaml")
	repo.Commit(t, "keep dir", map[string]string{"app/README.md": "nothing here"})
	requestReconcile(t, gr)
	c = waitReason(t, g, ns, "app", gitopsv1alpha1.EmptyRenderReason)
	g.Expect(c.Message).To(ContainSubstring("renders no objects"))
	stillThere(g)

	// Path deleted.
	repo.Delete(t, "no path", "app")
	requestReconcile(t, gr)
	c = waitReason(t, g, ns, "app", gitopsv1alpha1.PathNotFoundReason)
	g.Expect(c.Message).To(ContainSubstring(`"app" does not exist`))
	s := getSync(g, t, ns, "app")
	g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.StalledCondition)).To(BeTrue())
	stillThere(g)

	// Unknown kind: named, and nothing pruned.
	repo.Commit(t, "unknown kind", map[string]string{
		"app/a.yaml": configMap("a", nil),
		"app/w.yaml": "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
	})
	requestReconcile(t, gr)
	c = waitReason(t, g, ns, "app", gitopsv1alpha1.UnknownKindReason)
	g.Expect(c.Message).To(And(ContainSubstring("Widget"), ContainSubstring("app/w.yaml")))
	stillThere(g)

	// Fixed: b goes (it left git), a stays, Ready again.
	repo.Delete(t, "fix", "app/w.yaml")
	h := repo.Commit(t, "fixed", map[string]string{"app/a.yaml": configMap("a", map[string]string{"fixed": "yes"})})
	requestReconcile(t, gr)
	waitApplied(t, g, ns, "app", h)
	expectCM(t, g, ns, "a", map[string]string{"fixed": "yes"})
	expectGone(t, g, ns, "b")
}

// TestBadCredentials: git http-backend behind basic auth; wrong credentials
// fail the GitRepository with AuthenticationFailed, the Sync reports it and
// applies nothing; fixing the Secret recovers.
func TestBadCredentials(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "private")
	h := repo.Commit(t, "initial", map[string]string{"cm.yaml": configMap("private", nil)})
	base := srv.ServeHTTP(t, "user", "s3cret")

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"},
		StringData: map[string]string{"username": "user", "password": "wrong"}}
	g.Expect(env.Client.Create(t.Context(), sec)).To(Succeed())
	gr := gitRepository(ns, "private", base+"private.git")
	gr.Spec.SecretRef = &gitopsv1alpha1.LocalObjectReference{Name: "creds"}
	g.Expect(env.Client.Create(t.Context(), gr)).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "private", "", true))).To(Succeed())

	testenv.Eventually(g, func(g Gomega) {
		got := &gitopsv1alpha1.GitRepository{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(gr), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(gitopsv1alpha1.AuthenticationFailedReason))
	}).Should(Succeed())
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.ArtifactFailedReason)
	g.Expect(c.Message).To(ContainSubstring("AuthenticationFailed"))

	sec.StringData = map[string]string{"password": "s3cret"}
	g.Expect(env.Client.Update(t.Context(), sec)).To(Succeed())
	requestReconcile(t, gr)
	waitApplied(t, g, ns, "app", h)
	_, err := getCM(t, ns, "private")
	g.Expect(err).NotTo(HaveOccurred())
}
