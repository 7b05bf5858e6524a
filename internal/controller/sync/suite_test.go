package sync_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// One control plane for the package; no kube-controller-manager or nodes:
// Syncs in these tests apply ConfigMaps, Secrets and CRDs.
//
// The manager runs as the chart runs it: in lockdown, with Syncs that name
// no service account acting as the "default" ServiceAccount of their
// namespace. Every test namespace grants that ServiceAccount the documented
// tenant rights there (converge-edit plus the core kinds of the built-in
// edit role) and nothing else, so every test proves that the documented
// RBAC suffices.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{
		Manager: func(o *setup.Options) {
			// Go's http.Server.Shutdown waits up to 5s for a connection the API
			// server just opened to the webhook server; leave room for it.
			o.GracefulShutdownTimeout = 15 * time.Second
			chartGitOps(o)
		},
		OnNewNamespace: func(t testing.TB, e *testenv.Environment, ns string) {
			e.GrantTenant(t, ns, tenantSA)
		},
	}, &env))
}

// tenantSA is the ServiceAccount the suite's Syncs act as.
const tenantSA = "default"

// chartGitOps configures the GitOps controllers as the chart does by
// default.
func chartGitOps(o *setup.Options) {
	o.GitOps.Lockdown = true
	o.GitOps.DefaultServiceAccount = tenantSA
}

// grantCRDs lets the tenant ServiceAccount of ns install CustomResource
// Definitions (cluster-scoped, so a ClusterRoleBinding: what a platform
// team's Sync needs, beyond a tenant's rights) and use the kinds of group
// in ns.
func grantCRDs(t *testing.T, ns, group string) {
	t.Helper()
	ctx := t.Context()
	name := "crd-installer-" + ns
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}
	subj := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: tenantSA}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "custom-kinds"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{group}, Resources: []string{"widgets", "gadgets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "custom-kinds"}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	for _, o := range []client.Object{cr, crb, role, rb} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("granting CRDs to the tenant of %s: %v", ns, err)
		}
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = env.Client.Delete(ctx, crb)
		_ = env.Client.Delete(ctx, cr)
	})
}

func configMap(name string, data map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n", name)
	if len(data) > 0 {
		b.WriteString("data:\n")
		for k, v := range data {
			fmt.Fprintf(&b, "  %s: %q\n", k, v)
		}
	}
	return b.String()
}

func gitRepository(ns, name, url string) *gitopsv1alpha1.GitRepository {
	return &gitopsv1alpha1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       gitopsv1alpha1.GitRepositorySpec{URL: url, Interval: &metav1.Duration{Duration: time.Hour}},
	}
}

func newSync(ns, name, repo, path string, prune bool) *gitopsv1alpha1.Sync {
	return &gitopsv1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gitopsv1alpha1.SyncSpec{
			SourceRef:       gitopsv1alpha1.SourceReference{Name: repo},
			Path:            path,
			Prune:           ptr.To(prune),
			TargetNamespace: ns,
			RetryInterval:   &metav1.Duration{Duration: 2 * time.Second},
		},
	}
}

// requestReconcile sets converge.dev/reconcile-requested-at, as
// `converge reconcile` does.
func requestReconcile(t *testing.T, obj client.Object) {
	t.Helper()
	p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ReconcileRequestAnnotation, time.Now().Format(time.RFC3339Nano))
	if err := env.Client.Patch(t.Context(), obj, client.RawPatch("application/merge-patch+json", p)); err != nil {
		t.Fatalf("requesting a reconcile: %v", err)
	}
}

func getSync(g Gomega, t *testing.T, ns, name string) *gitopsv1alpha1.Sync {
	s := &gitopsv1alpha1.Sync{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	return s
}

// waitApplied waits until the Sync is Ready at a revision ending in hash.
func waitApplied(t *testing.T, g Gomega, ns, name, hash string) *gitopsv1alpha1.Sync {
	t.Helper()
	var s *gitopsv1alpha1.Sync
	testenv.Eventually(g, func(g Gomega) {
		s = getSync(g, t, ns, name)
		c := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(s.Status.LastAppliedRevision).To(HaveSuffix(hash), "Ready: %s %s", c.Reason, c.Message)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
		g.Expect(c.Reason).To(Equal(gitopsv1alpha1.SucceededReason))
	}).Should(Succeed())
	return s
}

// waitReason waits until the Sync's Ready condition is False with reason
// and, if given, a message containing each of msg.
func waitReason(t *testing.T, g Gomega, ns, name, reason string, msg ...string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(g, t, ns, name)
		c = meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		for _, m := range msg {
			g.Expect(c.Message).To(ContainSubstring(m))
		}
	}).Should(Succeed())
	return c
}

func getCM(t *testing.T, ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm)
	return cm, err
}

func expectCM(t *testing.T, g Gomega, ns, name string, data map[string]string) {
	t.Helper()
	testenv.Eventually(g, func(g Gomega) {
		cm, err := getCM(t, ns, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cm.Data).To(Equal(data))
	}).Should(Succeed())
}

func expectGone(t *testing.T, g Gomega, ns, name string) {
	t.Helper()
	testenv.Eventually(g, func(g Gomega) {
		_, err := getCM(t, ns, name)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ConfigMap %s/%s still exists", ns, name)
	}).Should(Succeed())
}

func inventoryNames(s *gitopsv1alpha1.Sync) []string {
	var out []string
	for _, r := range s.Status.Inventory {
		out = append(out, r.Kind+"/"+r.Name)
	}
	return out
}

// setup creates a repository served as kind ("file", "daemon"), its
// GitRepository and returns the repo.
func setupRepo(t *testing.T, ns string, files map[string]string) (*gittest.Repo, string, *gitopsv1alpha1.GitRepository) {
	t.Helper()
	return setupRepoLabelled(t, ns, files, nil)
}

func setupRepoLabelled(t *testing.T, ns string, files, labels map[string]string) (*gittest.Repo, string, *gitopsv1alpha1.GitRepository) {
	t.Helper()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "app")
	hash := repo.Commit(t, "initial", files)
	gr := gitRepository(ns, "app", repo.FileURL())
	gr.Labels = labels
	if err := env.Client.Create(t.Context(), gr); err != nil {
		t.Fatal(err)
	}
	return repo, hash, gr
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func rawMerge(p []byte) client.Patch { return client.RawPatch("application/merge-patch+json", p) }

const testenvTimeout = 30 * time.Second
