package sync_test

import (
	"bytes"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/graph"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/whycli"
)

// TestTreeListsWhatTheSyncApplied: the real Sync controller applies the
// objects of a real git repository's path; the graph below the Sync (what
// `converge tree sync/NAME` prints) lists exactly those objects, each
// "applies" from the Sync and Current, and the graph above one of them
// finds the Sync ("applied by"). An object of the repository outside the
// path, and one created by hand (even one carrying the Sync's labels), are
// not in it, and the graph above the hand-made one finds no Sync.
func TestTreeListsWhatTheSyncApplied(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	_, h1, _ := setupRepo(t, ns, map[string]string{
		"deploy/a.yaml":     configMap("a", map[string]string{"v": "1"}),
		"deploy/sub/b.yaml": configMap("b", nil) + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  k: v\n",
		"other/x.yaml":      configMap("x", nil),
	})
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "app", "deploy", true))).To(Succeed())
	s := waitApplied(t, g, ns, "app", h1)
	g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/a", "ConfigMap/b", "Secret/s"))
	// Made by hand, with the Sync's labels forged on it: the labels are
	// anyone's to write, and the Sync's inventory does not list it.
	g.Expect(env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-hand",
		Labels: map[string]string{"gitops.converge.dev/sync-name": "app", "gitops.converge.dev/sync-namespace": ns}}})).To(Succeed())

	c, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	b := &graph.Builder{Client: c}
	down, err := b.Down(t.Context(), graph.Ref{Group: "gitops.converge.dev", Version: "v1alpha1", Kind: "Sync", Namespace: ns, Name: "app"})
	g.Expect(err).NotTo(HaveOccurred())
	var applied []string
	for _, e := range down.Root.Edges {
		if e.Why == graph.Applies {
			g.Expect(e.Node.Status).To(Equal(graph.Current), "%s: %s", e.Node.Ref, e.Node.Message)
			applied = append(applied, e.Node.Ref.Kind+"/"+e.Node.Ref.Namespace+"/"+e.Node.Ref.Name)
		}
	}
	g.Expect(applied).To(ConsistOf("ConfigMap/"+ns+"/a", "ConfigMap/"+ns+"/b", "Secret/"+ns+"/s"))

	var tree bytes.Buffer
	g.Expect(whycli.Tree(t.Context(), c, &tree, ns, "sync/app", whycli.Options{})).To(Succeed())
	t.Logf("converge tree sync/app:\n%s", tree.String())
	g.Expect(tree.String()).To(MatchRegexp(`(?m)^` + ns + `\s+[├└]─applies ConfigMap/a\s+Current`))
	g.Expect(tree.String()).To(MatchRegexp(`(?m)^` + ns + `\s+[├└]─applies ConfigMap/b\s+Current`))
	g.Expect(tree.String()).To(MatchRegexp(`(?m)^` + ns + `\s+[├└]─applies Secret/s\s+Current`))
	g.Expect(tree.String()).NotTo(ContainSubstring("ConfigMap/x"), "outside spec.path: not applied")
	g.Expect(tree.String()).NotTo(ContainSubstring("by-hand"))

	var up bytes.Buffer
	g.Expect(whycli.Tree(t.Context(), c, &up, ns, "secret/s", whycli.Options{Up: true})).To(Succeed())
	g.Expect(up.String()).To(MatchRegexp(`(?m)^` + ns + `\s+[├└]─applied by Sync/app\s+Current`))
	var upHand bytes.Buffer
	g.Expect(whycli.Tree(t.Context(), c, &upHand, ns, "secret/by-hand", whycli.Options{Up: true})).To(Succeed())
	g.Expect(upHand.String()).NotTo(ContainSubstring("applied by"))
}
