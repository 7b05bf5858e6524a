package security

import (
	"bytes"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/whycli"
)

// TestForgedSyncLabelsClaimNoSync: tenant B puts tenant A's Sync labels
// (gitops.converge.dev/sync-name, sync-namespace) on a Secret of its
// own. The graph above it (`converge tree --up`, `converge why`, the ui),
// read by an admin who can read both namespaces, does not show it as
// applied by A's Sync: the labels only say which Sync to ask, and A's
// inventory does not list it.
func TestForgedSyncLabelsClaimNoSync(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	a, b := newTenant(t), newTenant(t)
	sy := &gitopsv1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Namespace: a.NS, Name: "app"},
		Spec: gitopsv1alpha1.SyncSpec{
			SourceRef:          gitopsv1alpha1.SourceReference{Name: "absent"},
			Path:               "deploy",
			Prune:              ptr.To(true),
			ServiceAccountName: tenantSA,
			TargetNamespace:    a.NS,
		},
	}
	g.Expect(a.Client.Create(t.Context(), sy)).To(Succeed())
	forged := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.NS, Name: "claims-a",
		Labels: map[string]string{"gitops.converge.dev/sync-name": "app", "gitops.converge.dev/sync-namespace": a.NS}}}
	g.Expect(b.Client.Create(t.Context(), forged)).To(Succeed())

	admin, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	var up bytes.Buffer
	g.Expect(whycli.Tree(t.Context(), admin, &up, b.NS, "secret/claims-a", whycli.Options{Up: true})).To(Succeed())
	t.Logf("converge tree --up secret/claims-a:\n%s", up.String())
	g.Expect(up.String()).To(ContainSubstring("Secret/claims-a"))
	g.Expect(up.String()).NotTo(ContainSubstring("applied by"))
	g.Expect(up.String()).NotTo(ContainSubstring("Sync/app"))
}
