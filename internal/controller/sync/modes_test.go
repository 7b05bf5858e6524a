package sync_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitopscli"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// identityMode is one way a Sync acts: as an impersonated ServiceAccount
// (the suite's manager, in lockdown, as the chart runs it) or as the
// manager itself (`converge up`'s default: no lockdown, no default service
// account, a Sync naming none).
type identityMode struct {
	name string
	// labels go on the mode's GitRepository and Syncs (a shard served by a
	// manager of its own for the manager mode).
	labels map[string]string
}

// eachMode runs f once per identity mode, in a namespace of its own. The
// manager mode starts a manager through setup.New with the options
// `converge up` uses for GitOps (GitOps.Lockdown false, no default service
// account), serving a shard of its own.
func eachMode(t *testing.T, f func(t *testing.T, g Gomega, ns string, m identityMode)) {
	t.Helper()
	for _, name := range []string{"serviceaccount", "manager"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ns := env.NewNamespace(t)
			m := identityMode{name: name}
			if name == "manager" {
				shard := "manager-" + ns
				env.StartManager(t, func(o *setup.Options) {
					o.Controllers = []string{"gitrepository", "sync"}
					o.ShardKey = shard
					o.GitOps.CacheDir = t.TempDir()
					o.GitOps.Lockdown = false
					o.GitOps.DefaultServiceAccount = ""
				})
				m.labels = map[string]string{setup.ShardLabel: shard}
			}
			f(t, g, ns, m)
		})
	}
}

func (m identityMode) sync(ns, name, path string) *gitopsv1alpha1.Sync {
	sy := newSync(ns, name, "app", path, true)
	sy.Labels = m.labels
	return sy
}

// TestSyncInEveryIdentityMode: apply, drift correction, the prune of a
// removed file, a mass prune held and then approved, and the prune of
// everything on deletion, both as an impersonated ServiceAccount and as the
// manager. As the manager, the prune once read the objects from the
// manager's cache, which strips managedFields: every object looked foreign,
// nothing was deleted and the inventory forgot it.
func TestSyncInEveryIdentityMode(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	eachMode(t, func(t *testing.T, g Gomega, ns string, m identityMode) {
		files := map[string]string{}
		for i := range 6 {
			files[fmt.Sprintf("app/cm%d.yaml", i)] = configMap(fmt.Sprintf("cm%d", i), map[string]string{"v": "1"})
		}
		repo, h1, gr := setupRepoLabelled(t, ns, files, m.labels)
		sy := m.sync(ns, "app", "app")
		sy.Spec.Interval = &metav1.Duration{Duration: time.Hour}
		g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
		s := waitApplied(t, g, ns, "app", h1)
		g.Expect(s.Status.Inventory).To(HaveLen(6))
		expectCM(t, g, ns, "cm0", map[string]string{"v": "1"})

		// Drift: another writer's change is corrected at once.
		cm, err := getCM(t, ns, "cm0")
		g.Expect(err).NotTo(HaveOccurred())
		cm.Data["v"] = "edited"
		g.Expect(env.Client.Update(t.Context(), cm, client.FieldOwner("intruder"))).To(Succeed())
		expectCM(t, g, ns, "cm0", map[string]string{"v": "1"})

		// A removed file: its object is pruned and leaves the inventory.
		h2 := repo.Delete(t, "remove cm5", "app/cm5.yaml")
		requestReconcile(t, gr)
		s = waitApplied(t, g, ns, "app", h2)
		expectGone(t, g, ns, "cm5")
		g.Expect(inventoryNames(s)).NotTo(ContainElement("ConfigMap/cm5"))
		g.Expect(s.Status.LastApplySummary).To(ContainSubstring("1 deleted"))

		// A mass prune (4 of 5, over the default 50%) is held, then
		// approved: exactly the held objects go.
		h3 := repo.Delete(t, "remove four", "app/cm1.yaml", "app/cm2.yaml", "app/cm3.yaml", "app/cm4.yaml")
		requestReconcile(t, gr)
		waitReason(t, g, ns, "app", gitopsv1alpha1.PruneLimitExceededReason, "held for approval")
		s = getSync(g, t, ns, "app")
		g.Expect(s.Status.PendingPrune).NotTo(BeNil())
		g.Expect(s.Status.PendingPrune.Revision).To(HaveSuffix(h3))
		g.Expect(s.Status.Inventory).To(HaveLen(5))
		var out strings.Builder
		g.Expect(gitopscli.ApprovePrune(t.Context(), env.Client, &out, client.ObjectKeyFromObject(s))).To(Succeed())
		g.Expect(out.String()).To(ContainSubstring("approved pruning 4 objects"))
		s = waitApplied(t, g, ns, "app", h3)
		g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/cm0"))
		for i := 1; i < 5; i++ {
			expectGone(t, g, ns, fmt.Sprintf("cm%d", i))
		}

		// Deleting the Sync prunes everything it applied.
		g.Expect(env.Client.Delete(t.Context(), s)).To(Succeed())
		testenv.Eventually(g, func(g Gomega) {
			err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), &gitopsv1alpha1.Sync{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}).Should(Succeed())
		expectGone(t, g, ns, "cm0")
	})
}

// TestLeakedObjectsArePruned: objects left as the broken release left
// them (labelled for the Sync, applied by converge-sync with server-side
// apply, in no inventory of a Sync that applied a revision) are found and
// pruned with the usual rules, in both identity modes; a labelled object
// someone else applied and a leaked one opted out with converge.dev/prune:
// disabled stay. A new Sync (no revision applied: it never pruned, so
// nothing of it leaked) deletes nothing it did not apply, even labelled
// for its name (an earlier Sync's orphans).
func TestLeakedObjectsArePruned(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	eachMode(t, func(t *testing.T, g Gomega, ns string, m identityMode) {
		_, h1, _ := setupRepoLabelled(t, ns, map[string]string{"app/kept.yaml": configMap("kept", nil), "fresh/new.yaml": configMap("new", nil)}, m.labels)
		leave := func(sync, name, manager string, annotations map[string]string) {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("ConfigMap")
			u.SetNamespace(ns)
			u.SetName(name)
			u.SetLabels(map[string]string{gitopsv1alpha1.SyncNameLabel: sync, gitopsv1alpha1.SyncNamespaceLabel: ns})
			u.SetAnnotations(annotations)
			g.Expect(env.Client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership)).To(Succeed())
		}
		leave("app", "leaked-1", "converge-sync", nil)
		leave("app", "leaked-2", "converge-sync", nil)
		leave("app", "foreign", "someone-else", nil)
		leave("app", "opted-out", "converge-sync", map[string]string{gitopsv1alpha1.PruneAnnotation: gitopsv1alpha1.PruneDisabled})
		leave("fresh", "orphan", "converge-sync", nil)

		// A new Sync: applies its own, deletes nothing else.
		g.Expect(env.Client.Create(t.Context(), m.sync(ns, "fresh", "fresh"))).To(Succeed())
		fresh := waitApplied(t, g, ns, "fresh", h1)
		g.Expect(inventoryNames(fresh)).To(ConsistOf("ConfigMap/new"))
		g.Expect(fresh.Status.PendingPrune).To(BeNil())
		_, err := getCM(t, ns, "orphan")
		g.Expect(err).NotTo(HaveOccurred(), "a new Sync deleted an object it never applied")

		// The Sync as the broken release left it: a revision applied, the
		// leaked objects dropped from its inventory. It is created
		// suspended, given that status, then resumed.
		sy := m.sync(ns, "app", "app")
		sy.Spec.Suspend = true
		g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
		testenv.Eventually(g, func(g Gomega) {
			g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(sy), sy)).To(Succeed())
			g.Expect(sy.Status.ObservedGeneration).To(Equal(sy.Generation))
		}).Should(Succeed())
		base := sy.DeepCopy()
		sy.Status.LastAppliedRevision = "main@sha1:" + strings.Repeat("0", 40)
		sy.Status.Inventory = []gitopsv1alpha1.ObjectRef{{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: "kept"}}
		g.Expect(env.Client.Status().Patch(t.Context(), sy, client.MergeFrom(base))).To(Succeed())
		base = sy.DeepCopy()
		sy.Spec.Suspend = false
		g.Expect(env.Client.Patch(t.Context(), sy, client.MergeFrom(base))).To(Succeed())
		// Two leaked of three entries is over the default 50%: held
		// until approved, as any mass prune.
		waitReason(t, g, ns, "app", gitopsv1alpha1.PruneLimitExceededReason, "held for approval")
		s := getSync(g, t, ns, "app")
		g.Expect(s.Status.PendingPrune).NotTo(BeNil())
		var held []string
		for _, o := range s.Status.PendingPrune.Objects {
			held = append(held, o.Name)
		}
		g.Expect(held).To(ConsistOf("leaked-1", "leaked-2"))
		g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/kept", "ConfigMap/leaked-1", "ConfigMap/leaked-2"))
		var out strings.Builder
		g.Expect(gitopscli.ApprovePrune(t.Context(), env.Client, &out, client.ObjectKeyFromObject(s))).To(Succeed())
		s = waitApplied(t, g, ns, "app", h1)
		g.Expect(inventoryNames(s)).To(ConsistOf("ConfigMap/kept"))
		expectGone(t, g, ns, "leaked-1")
		expectGone(t, g, ns, "leaked-2")
		for _, name := range []string{"foreign", "opted-out", "kept"} {
			_, err := getCM(t, ns, name)
			g.Expect(err).NotTo(HaveOccurred(), "%s must stay", name)
		}
		testenv.Eventually(g, func(g Gomega) {
			evs := &eventsv1.EventList{}
			g.Expect(env.Client.List(t.Context(), evs, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range evs.Items {
				if e.Reason == "LeakedObjectsFound" && e.Type == corev1.EventTypeNormal {
					notes = append(notes, e.Note)
				}
			}
			g.Expect(notes).To(ContainElement(ContainSubstring("2 objects labelled for this Sync")))
		}).Should(Succeed())
	})
}

// TestWaitFailsAtOnceOnAStalledChild: a Sync with wait: true applies a
// child Sync whose path does not exist; the child is Stalled
// (PathNotFound), which kstatus reads as Failed. The parent fails well
// before its 5-minute timeout, naming the child, its reason and its
// message; while a child is only in progress it waits. Both identity modes.
func TestWaitFailsAtOnceOnAStalledChild(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	eachMode(t, func(t *testing.T, g Gomega, ns string, m identityMode) {
		labels := ""
		for k, v := range m.labels {
			labels += fmt.Sprintf("\n  labels:\n    %s: %s", k, v)
		}
		child := fmt.Sprintf(`apiVersion: gitops.converge.dev/v1alpha1
kind: Sync
metadata:
  name: child%s
spec:
  sourceRef: {name: app}
  path: does-not-exist
  prune: true
`, labels)
		_, _, _ = setupRepoLabelled(t, ns, map[string]string{"parent/child.yaml": child}, m.labels)
		sy := m.sync(ns, "parent", "parent")
		sy.Spec.Wait = true
		sy.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Minute}
		g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
		c := waitReason(t, g, ns, "parent", gitopsv1alpha1.HealthCheckFailedReason,
			"Sync.gitops.converge.dev/"+ns+"/child", "Failed ("+gitopsv1alpha1.PathNotFoundReason+")", "does-not-exist")
		g.Expect(c.Message).NotTo(ContainSubstring("timed out"))
	})
}
