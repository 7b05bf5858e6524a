package sync_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/gitopscli"
	"github.com/converge-dev/converge/internal/reconcilecli"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestCLIDiffAndReconcile: `converge diff sync` previews a new commit with
// a server-side dry-run (created, configured with a diff, pruned) without
// changing anything; `converge reconcile` then applies it.
func TestCLIDiffAndReconcile(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	repo, h1, gr := setupRepo(t, ns, map[string]string{
		"app/a.yaml": configMap("a", map[string]string{"v": "1"}),
		"app/b.yaml": configMap("b", nil),
		"app/c.yaml": configMap("c", nil),
	})
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "app", "app", true))).To(Succeed())
	waitApplied(t, g, ns, "app", h1)

	repo.Delete(t, "drop b", "app/b.yaml")
	h2 := repo.Commit(t, "change", map[string]string{
		"app/a.yaml": configMap("a", map[string]string{"v": "2"}),
		"app/d.yaml": configMap("d", nil),
	})
	var out strings.Builder
	changed, err := gitopscli.Diff(t.Context(), env.Client, &out, client.ObjectKey{Namespace: ns, Name: "app"}, gitopscli.DiffOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	s := out.String()
	g.Expect(s).To(ContainSubstring("+ ConfigMap/" + ns + "/d created"))
	g.Expect(s).To(ContainSubstring("~ ConfigMap/" + ns + "/a configured"))
	g.Expect(s).To(ContainSubstring(`-  v: "1"`))
	g.Expect(s).To(ContainSubstring(`+  v: "2"`))
	g.Expect(s).To(ContainSubstring("- ConfigMap/" + ns + "/b pruned"))
	g.Expect(s).To(ContainSubstring("1 unchanged"))
	expectCM(t, g, ns, "a", map[string]string{"v": "1"}) // a dry run changes nothing

	out.Reset()
	ref, err := reconcilecli.ParseArgs([]string{"gitrepository/" + gr.Name}, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reconcilecli.Reconcile(t.Context(), env.Client, &out, ref, testenvTimeout)).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring(h2))
	waitApplied(t, g, ns, "app", h2)
	expectCM(t, g, ns, "a", map[string]string{"v": "2"})
}
