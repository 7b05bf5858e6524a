package sync_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestKstatusReadsGitOpsKinds: the statuses the Sync and GitRepository
// controllers write, read through kstatus (as a parent Sync with wait, Flux
// or kpt reads them): Ready is Current, waiting or retrying is InProgress,
// Stalled is Failed with the reason.
func TestKstatusReadsGitOpsKinds(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	// Its own CRD group: a CRD is cluster-scoped, and another test's Sync
	// applying the same one would own it.
	const group = "kstatus.converge.dev"
	grantCRDs(t, ns, group)
	_, h1, gr := setupRepo(t, ns, map[string]string{
		"ready/cm.yaml":           configMap("ready", nil),
		"waiting/gadget-crd.yaml": strings.ReplaceAll(gadgetCRD, "test.converge.dev", group),
		"waiting/gadget.yaml":     "apiVersion: " + group + "/v1\nkind: Gadget\nmetadata:\n  name: g\n",
	})
	read := func(g Gomega, kind, name string) *kstatus.Result {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gitopsv1alpha1.GroupVersion.WithKind(kind))
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed())
		res, err := kstatus.Compute(u)
		g.Expect(err).NotTo(HaveOccurred())
		return res
	}
	expect := func(kind, name string, want kstatus.Status, reason string) {
		t.Helper()
		testenv.Eventually(g, func(g Gomega) {
			res := read(g, kind, name)
			g.Expect(res.Status).To(Equal(want), "%s %s: %s", kind, name, res.Message)
			if reason != "" {
				g.Expect(res.Conditions).To(ContainElement(HaveField("Reason", reason)))
			}
		}).Should(Succeed())
	}

	// GitRepository: Current once fetched.
	expect("GitRepository", gr.Name, kstatus.CurrentStatus, "")

	// Sync: Ready -> Current.
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "ready", "app", "ready", true))).To(Succeed())
	waitApplied(t, g, ns, "ready", h1)
	expect("Sync", "ready", kstatus.CurrentStatus, "")

	// Sync waiting for health -> InProgress.
	waiting := newSync(ns, "waiting", "app", "waiting", true)
	waiting.Spec.Wait = true
	waiting.Spec.HealthChecks = []gitopsv1alpha1.HealthCheck{{APIVersion: group + "/v1", Kind: "Gadget",
		Current: `has(self.status) && self.status.ready == true`}}
	g.Expect(env.Client.Create(t.Context(), waiting)).To(Succeed())
	expect("Sync", "waiting", kstatus.InProgressStatus, gitopsv1alpha1.WaitingForHealthReason)

	// Sync Stalled (its path does not exist) -> Failed, with the reason.
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "stalled", "app", "missing", true))).To(Succeed())
	expect("Sync", "stalled", kstatus.FailedStatus, gitopsv1alpha1.PathNotFoundReason)

	// GitRepository retrying a fetch -> InProgress.
	broken := gitRepository(ns, "broken", "file:///nonexistent/"+ns)
	g.Expect(env.Client.Create(t.Context(), broken)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		res := read(g, "GitRepository", "broken")
		g.Expect(res.Status).To(BeElementOf(kstatus.InProgressStatus, kstatus.FailedStatus), res.Message)
	}).Should(Succeed())
}
