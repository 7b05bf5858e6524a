package sync_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitopscli"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestNamespaceDefaulting: a namespaced object without metadata.namespace
// lands in the Sync's own namespace when spec.targetNamespace is unset,
// and in targetNamespace when set; `converge diff sync` previews the same
// namespace.
func TestNamespaceDefaulting(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	other := env.NewNamespace(t)
	// The tenant of ns may also write in other (as a platform team's
	// Sync deploying to another namespace would).
	g.Expect(env.Client.Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "from-" + ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: tenantSA}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: tenantSA + "-core"},
	})).To(Succeed())
	_, h, _ := setupRepo(t, ns, map[string]string{
		"own/a.yaml":    configMap("a", map[string]string{"v": "1"}),
		"target/b.yaml": configMap("b", map[string]string{"v": "1"}),
	})

	// Each Sync is created suspended, previewed with diff, then resumed.
	own := newSync(ns, "own", "app", "own", true)
	own.Spec.TargetNamespace = ""
	own.Spec.Suspend = true
	var out strings.Builder
	g.Expect(env.Client.Create(t.Context(), own)).To(Succeed())
	_, err := gitopscli.Diff(t.Context(), env.Client, &out, client.ObjectKey{Namespace: ns, Name: "own"}, gitopscli.DiffOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.String()).To(ContainSubstring("+ ConfigMap/" + ns + "/a created"))
	g.Expect(env.Client.Patch(t.Context(), own, rawMerge([]byte(`{"spec":{"suspend":false}}`)))).To(Succeed())
	s := waitApplied(t, g, ns, "own", h)
	expectCM(t, g, ns, "a", map[string]string{"v": "1"})
	g.Expect(s.Status.Inventory).To(HaveLen(1))
	g.Expect(s.Status.Inventory[0].Namespace).To(Equal(ns))
	_, err = getCM(t, "default", "a")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "an object without a namespace must never land in default")

	target := newSync(ns, "target", "app", "target", true)
	target.Spec.TargetNamespace = other
	target.Spec.Suspend = true
	g.Expect(env.Client.Create(t.Context(), target)).To(Succeed())
	out.Reset()
	_, err = gitopscli.Diff(t.Context(), env.Client, &out, client.ObjectKey{Namespace: ns, Name: "target"}, gitopscli.DiffOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.String()).To(ContainSubstring("+ ConfigMap/" + other + "/b created"))
	g.Expect(env.Client.Patch(t.Context(), target, rawMerge([]byte(`{"spec":{"suspend":false}}`)))).To(Succeed())
	waitApplied(t, g, ns, "target", h)
	expectCM(t, g, other, "b", map[string]string{"v": "1"})
	_, err = getCM(t, ns, "b")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
}

// TestUnknownKindIsOneStalledCondition: objects of a kind the API server
// does not serve give one Stalled condition (UnknownKind) naming the kind
// and the file, not one error per object, and nothing of the revision is
// applied. `converge diff sync` names the same kind and file.
func TestUnknownKindIsOneStalledCondition(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	var widgets strings.Builder
	for _, n := range []string{"w1", "w2", "w3"} {
		widgets.WriteString("---\napiVersion: example.converge.dev/v1\nkind: Widget\nmetadata:\n  name: " + n + "\n")
	}
	_, _, _ = setupRepo(t, ns, map[string]string{
		"app/a.yaml":       configMap("a", nil),
		"app/widgets.yaml": widgets.String(),
	})
	sy := newSync(ns, "app", "app", "app", true)
	sy.Spec.TargetNamespace = ""
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	c := waitReason(t, g, ns, "app", gitopsv1alpha1.UnknownKindReason, "Widget", "example.converge.dev/v1", "app/widgets.yaml")
	g.Expect(strings.Count(c.Message, "Widget/")).To(Equal(1), "one message, not one per object: %s", c.Message)
	s := getSync(g, t, ns, "app")
	st := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.StalledCondition)
	g.Expect(st).NotTo(BeNil())
	g.Expect(st.Reason).To(Equal(gitopsv1alpha1.UnknownKindReason))
	_, err := getCM(t, ns, "a")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing is applied while a kind is unknown")

	var out strings.Builder
	_, err = gitopscli.Diff(t.Context(), env.Client, &out, client.ObjectKey{Namespace: ns, Name: "app"}, gitopscli.DiffOptions{})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(ContainSubstring("Widget"), ContainSubstring("app/widgets.yaml")))
}
