package security

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/sync"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/webhookcert"
)

// The attacks of this file are the tenant's Syncs: what git holds is the
// tenant's, so everything a Sync reads or writes must be something the
// tenant's own ServiceAccount may read or write (docs/security.md, "Syncs
// act as the tenant, never as the manager").

// TestSyncCannotWriteOutsideItsNamespace: a tenant's Sync applies a
// privileged Pod into kube-system and a ConfigMap into another tenant's
// namespace (both of which the manager's own ClusterRole could write:
// Pods and Secrets everywhere). Acting as the tenant's ServiceAccount, or as
// the namespace's default one when it names none, both are Forbidden, the
// status names the identity, and neither object exists.
func TestSyncCannotWriteOutsideItsNamespace(t *testing.T) {
	t.Parallel()
	a, b := newTenant(t), newTenant(t)
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: pwn-%[1]s
  namespace: kube-system
spec:
  hostPID: true
  containers:
  - name: c
    image: busybox
    securityContext: {privileged: true}
`, a.NS)
	files := map[string]string{
		"app/pod.yaml":   pod,
		"app/cm.yaml":    configMap(b.NS, "planted", map[string]string{"by": a.NS}),
		"app/local.yaml": configMap("", "local", nil),
	}
	tenantRepo(t, a, files)
	for _, sa := range []string{tenantSA, ""} {
		t.Run("serviceAccountName="+sa, func(t *testing.T) {
			g := NewWithT(t)
			name := "escape-" + map[string]string{tenantSA: "named", "": "default"}[sa]
			sy := tenantSync(a, name, "app")
			sy.Spec.ServiceAccountName = sa
			g.Expect(a.Client.Create(t.Context(), sy)).To(Succeed())
			user := a.User
			if sa == "" {
				// The chart's gitops.defaultServiceAccount: the namespace's
				// "default", which holds no rights.
				user = "system:serviceaccount:" + a.NS + ":default"
			}
			c := waitSyncReason(t, g, a.NS, name, gitopsv1alpha1.ApplyFailedReason,
				`pods "pwn-`+a.NS+`" is forbidden: User "`+user+`"`,
				`configmaps "planted" is forbidden: User "`+user+`"`)
			g.Expect(c.Message).To(ContainSubstring(`in the namespace "kube-system"`))
			g.Expect(c.Message).To(ContainSubstring(`in the namespace "` + b.NS + `"`))
		})
	}
	g := NewWithT(t)
	err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "pwn-" + a.NS}, &corev1.Pod{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a Pod was created in kube-system: %v", err)
	err = env.Client.Get(t.Context(), client.ObjectKey{Namespace: b.NS, Name: "planted"}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a ConfigMap was created in another tenant's namespace: %v", err)
}

// TestSyncWithoutServiceAccountInLockdownIsStalled: a manager in lockdown
// with no default service account never lets a Sync act as itself. A Sync
// naming none (written past the webhook: this manager serves a shard the
// suite's webhook does not know about) is Stalled with
// ServiceAccountRequired, the message says how to grant rights, and nothing
// is applied. (The webhook refusal of the same Sync is
// TestSyncWithoutServiceAccountInLockdownIsRefused.)
func TestSyncWithoutServiceAccountInLockdownIsStalled(t *testing.T) {
	t.Parallel()
	a := newTenant(t)
	g := NewWithT(t)
	shard := "lockdown-" + a.NS
	env.StartManager(t, func(o *setup.Options) {
		chartDefaults(o)
		o.Controllers = []string{"gitrepository", "sync"}
		o.ShardKey = shard
		o.GitOps.CacheDir = t.TempDir()
		o.GitOps.DefaultServiceAccount = "" // lockdown with no default
	})
	gr := tenantRepo(t, a, map[string]string{"app/cm.yaml": configMap("", "applied", nil)}, setup.ShardLabel, shard)
	g.Expect(gr).NotTo(BeNil())
	sy := tenantSync(a, "no-identity", "app")
	sy.Spec.ServiceAccountName = ""
	sy.Labels = map[string]string{setup.ShardLabel: shard}
	g.Expect(a.Client.Create(t.Context(), sy)).To(Succeed())
	c := waitSyncReason(t, g, a.NS, "no-identity", gitopsv1alpha1.ServiceAccountRequiredReason,
		"spec.serviceAccountName", "lockdown", "create rolebinding")
	g.Expect(c.Message).NotTo(BeEmpty())
	s := getSync(t, g, a.NS, "no-identity")
	g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.StalledCondition)).To(BeTrue())
	g.Expect(s.Status.Inventory).To(BeEmpty())
	err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: a.NS, Name: "applied"}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Sync applied as the manager: %v", err)

	// Deleting it never acts as the manager either: it just goes.
	g.Expect(a.Client.Delete(t.Context(), sy)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(sy), &gitopsv1alpha1.Sync{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	}).Should(Succeed())
}

// TestDependsOnIsNoOracle: dependsOn with a CEL ready expression on a
// Secret of another tenant would be a one-bit-per-guess oracle if the
// manager read it. Acting as the tenant, the read is Forbidden: two Syncs
// guessing differently (one right, one wrong) get the same status, which
// names the forbidden read and carries no CEL result.
func TestDependsOnIsNoOracle(t *testing.T) {
	t.Parallel()
	a, b := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.NS, Name: "db"},
		Data: map[string][]byte{"password": []byte("hunter2")}}
	g.Expect(b.Client.Create(ctx, secret)).To(Succeed())
	before := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(secret), before)).To(Succeed())
	tenantRepo(t, a, map[string]string{"app/cm.yaml": configMap("", "gated", nil)})

	guesses := map[string]string{
		"right": `self.data.password.startsWith("aHVu")`, // base64 of "hun"
		"wrong": `self.data.password.startsWith("eHl6")`,
	}
	msgs := map[string]string{}
	for name, guess := range guesses {
		sy := tenantSync(a, name, "app")
		sy.Spec.DependsOn = []gitopsv1alpha1.Dependency{{APIVersion: "v1", Kind: "Secret", Namespace: b.NS, Name: "db", Ready: guess}}
		g.Expect(a.Client.Create(ctx, sy)).To(Succeed())
	}
	for name, guess := range guesses {
		c := waitSyncReason(t, g, a.NS, name, gitopsv1alpha1.ReadForbiddenReason,
			"dependency Secret "+b.NS+"/db", `secrets "db" is forbidden: User "`+a.User+`" cannot get resource "secrets"`)
		g.Expect(c.Message).NotTo(ContainSubstring(guess))
		g.Expect(c.Message).NotTo(ContainSubstring("is false"))
		g.Expect(c.Message).NotTo(ContainSubstring("not ready"))
		msgs[name] = c.Message
	}
	g.Expect(msgs["right"]).To(Equal(msgs["wrong"]), "the status differs with the guess")
	for name := range guesses {
		s := getSync(t, g, a.NS, name)
		g.Expect(s.Status.Inventory).To(BeEmpty(), "%s applied while its dependency was unreadable", name)
	}
	after := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(secret), after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the other tenant's Secret changed")
}

// TestHealthChecksReadAsTheTenant: a health check is another way to
// evaluate CEL on an object. (1) A Sync "applies" another tenant's Secret
// (as the manager, server-side apply would merge into it and the check
// would then read it) with a CEL health check guessing its password: the
// apply is Forbidden, the Secret is untouched, and no check result is
// reported. (2) A Sync whose ServiceAccount may write but not read
// ConfigMaps applies one and waits for its health: the health read is
// Forbidden (ReadForbidden), and no check is evaluated.
func TestHealthChecksReadAsTheTenant(t *testing.T) {
	t.Parallel()
	a, b := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.NS, Name: "db"},
		Data: map[string][]byte{"password": []byte("hunter2")}}
	g.Expect(b.Client.Create(ctx, secret)).To(Succeed())
	before := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(secret), before)).To(Succeed())
	tenantRepo(t, a, map[string]string{
		"steal/secret.yaml": fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: %s\n", b.NS),
		"blind/cm.yaml":     configMap("", "blind", map[string]string{"k": "v"}),
	})

	steal := tenantSync(a, "steal", "steal")
	steal.Spec.Wait = true
	steal.Spec.HealthChecks = []gitopsv1alpha1.HealthCheck{{APIVersion: "v1", Kind: "Secret",
		Current: `self.data.password.startsWith("aHVu")`}}
	g.Expect(a.Client.Create(ctx, steal)).To(Succeed())
	c := waitSyncReason(t, g, a.NS, "steal", gitopsv1alpha1.ApplyFailedReason,
		`secrets "db" is forbidden: User "`+a.User+`"`)
	g.Expect(c.Message).NotTo(ContainSubstring("startsWith"))
	s := getSync(t, g, a.NS, "steal")
	g.Expect(meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.HealthyCondition)).To(BeNil(), "a health result was reported")
	after := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(secret), after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the other tenant's Secret changed")
	g.Expect(after.Labels).NotTo(HaveKey(gitopsv1alpha1.SyncNameLabel))

	// A ServiceAccount that may write ConfigMaps but not read them (granted
	// by the cluster admin).
	writer := "writer"
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: a.NS, Name: writer}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: a.NS, Name: writer}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "patch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: a.NS, Name: writer},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: a.NS, Name: writer}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: writer}},
	} {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
	}
	blind := tenantSync(a, "blind", "blind")
	blind.Spec.ServiceAccountName = writer
	blind.Spec.HealthChecks = []gitopsv1alpha1.HealthCheck{{APIVersion: "v1", Kind: "ConfigMap", Current: `self.data.k == "v"`}}
	g.Expect(a.Client.Create(ctx, blind)).To(Succeed())
	c = waitSyncReason(t, g, a.NS, "blind", gitopsv1alpha1.ReadForbiddenReason,
		"checking the health of ConfigMap/"+a.NS+"/blind",
		`configmaps "blind" is forbidden: User "system:serviceaccount:`+a.NS+`:writer" cannot get resource "configmaps"`)
	g.Expect(c.Message).NotTo(ContainSubstring(`self.data.k`))
	s = getSync(t, g, a.NS, "blind")
	g.Expect(meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.HealthyCondition)).To(BeNil(), "a health result was reported")
}

// TestPruneNeverDeletesWhatTheTenantCannot: a ConfigMap in another
// tenant's namespace carries this Sync's labels and was applied by the Sync
// field manager (as a Sync acting as the manager once did). The tenant's
// git names it, so it enters the inventory (written ahead of a Forbidden
// apply), then drops it, so it is pruned: the lookup before the delete is
// Forbidden (ReadForbidden), and deleting the Sync orphans it. It is never
// deleted.
func TestPruneNeverDeletesWhatTheTenantCannot(t *testing.T) {
	t.Parallel()
	a, b := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	victim := &unstructured.Unstructured{}
	victim.SetAPIVersion("v1")
	victim.SetKind("ConfigMap")
	victim.SetNamespace(b.NS)
	victim.SetName("victim")
	victim.SetLabels(map[string]string{gitopsv1alpha1.SyncNameLabel: "app", gitopsv1alpha1.SyncNamespaceLabel: a.NS})
	g.Expect(unstructured.SetNestedStringMap(victim.Object, map[string]string{"owner": b.NS}, "data")).To(Succeed())
	g.Expect(env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(victim), client.FieldOwner(sync.FieldManager))).To(Succeed())
	repo := tenantRepoRaw(t, a, map[string]string{
		"app/local.yaml":  configMap("", "local", nil),
		"app/victim.yaml": configMap(b.NS, "victim", map[string]string{"owner": a.NS}),
	})
	sy := tenantSync(a, "app", "app")
	g.Expect(a.Client.Create(ctx, sy)).To(Succeed())
	waitSyncReason(t, g, a.NS, "app", gitopsv1alpha1.ApplyFailedReason, `configmaps "victim" is forbidden`)
	s := getSync(t, g, a.NS, "app")
	g.Expect(s.Status.Inventory).To(ContainElement(HaveField("Namespace", b.NS)), "the victim is in the inventory")

	repo.Delete(t, "drop the victim", "app/victim.yaml")
	requestReconcile(t, a, "app")
	waitSyncReason(t, g, a.NS, "app", gitopsv1alpha1.ReadForbiddenReason,
		"reading ConfigMap/"+b.NS+"/victim before pruning",
		`configmaps "victim" is forbidden: User "`+a.User+`" cannot get resource "configmaps"`)
	expectVictim := func() {
		t.Helper()
		got := &corev1.ConfigMap{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(victim), got)).To(Succeed(), "the victim was pruned")
		g.Expect(got.Data).To(Equal(map[string]string{"owner": b.NS}))
	}
	expectVictim()

	g.Expect(a.Client.Delete(ctx, sy)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(sy), &gitopsv1alpha1.Sync{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Sync is stuck deleting")
	}).Should(Succeed())
	expectVictim()
}

// --- helpers ---

// configMap is a ConfigMap manifest, in ns unless empty.
func configMap(ns, name string, data map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n", name)
	if ns != "" {
		fmt.Fprintf(&b, "  namespace: %s\n", ns)
	}
	if len(data) > 0 {
		b.WriteString("data:\n")
		for k, v := range data {
			fmt.Fprintf(&b, "  %s: %q\n", k, v)
		}
	}
	return b.String()
}

// tenantRepo serves files from a git daemon and creates the tenant's
// GitRepository "app" for it, as the tenant, with optional label key/value.
func tenantRepo(t *testing.T, tn *tenant, files map[string]string, label ...string) *gitopsv1alpha1.GitRepository {
	t.Helper()
	_, gr := newTenantRepo(t, tn, files, label...)
	return gr
}

// tenantRepoRaw is tenantRepo returning the repository, for later commits.
func tenantRepoRaw(t *testing.T, tn *tenant, files map[string]string) *gittest.Repo {
	t.Helper()
	repo, _ := newTenantRepo(t, tn, files)
	return repo
}

func newTenantRepo(t *testing.T, tn *tenant, files map[string]string, label ...string) (*gittest.Repo, *gitopsv1alpha1.GitRepository) {
	t.Helper()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "app")
	repo.Commit(t, "initial", files)
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "app"},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: srv.ServeDaemon(t) + "app.git", Interval: &metav1.Duration{Duration: time.Hour}}}
	if len(label) == 2 {
		gr.Labels = map[string]string{label[0]: label[1]}
	}
	if err := tn.Client.Create(t.Context(), gr); err != nil {
		t.Fatalf("the tenant cannot create its GitRepository: %v", err)
	}
	return repo, gr
}

// tenantSync is a Sync of the tenant's GitRepository "app", acting as the
// tenant's ServiceAccount.
func tenantSync(tn *tenant, name, path string) *gitopsv1alpha1.Sync {
	return &gitopsv1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name},
		Spec: gitopsv1alpha1.SyncSpec{
			SourceRef:          gitopsv1alpha1.SourceReference{Name: "app"},
			Path:               path,
			Prune:              ptr.To(true),
			TargetNamespace:    tn.NS,
			ServiceAccountName: tenantSA,
			RetryInterval:      &metav1.Duration{Duration: 2 * time.Second},
		},
	}
}

func getSync(t *testing.T, g Gomega, ns, name string) *gitopsv1alpha1.Sync {
	t.Helper()
	s := &gitopsv1alpha1.Sync{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	return s
}

// waitSyncReason waits until the Sync is Ready=False with reason and a
// message containing each of msg, and returns that condition.
func waitSyncReason(t *testing.T, g Gomega, ns, name, reason string, msg ...string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(t, g, ns, name)
		c = meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		for _, m := range msg {
			g.Expect(c.Message).To(ContainSubstring(m))
		}
	}).Should(Succeed())
	return c
}

// requestReconcile asks, as the tenant, for an immediate reconciliation of
// its Sync and of the GitRepository "app" (so the new commit is fetched).
func requestReconcile(t *testing.T, tn *tenant, sync string) {
	t.Helper()
	p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ReconcileRequestAnnotation, time.Now().Format(time.RFC3339Nano))
	for _, o := range []client.Object{
		&gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "app"}},
		&gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: sync}},
	} {
		if err := tn.Client.Patch(t.Context(), o, client.RawPatch("application/merge-patch+json", p)); err != nil {
			t.Fatalf("requesting a reconcile: %v", err)
		}
	}
}

// TestSyncWithoutServiceAccountInLockdownIsRefused: the admission side of
// lockdown without a default service account, through the real API server
// and the real wiring: a manager built by setup.New with
// Options.GitOps.Lockdown and no default service account (what
// --gitops-lockdown with an empty --gitops-default-service-account does)
// serves its webhooks, registered for the tenant's namespace only. A Sync
// naming no ServiceAccount is refused naming the field and how to grant
// rights; naming one is admitted.
func TestSyncWithoutServiceAccountInLockdownIsRefused(t *testing.T) {
	t.Parallel()
	a := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	port, err := testenv.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	// Another tool (as Helm or cert-manager would) issued the serving
	// certificate; the manager serves it and injects nothing.
	certDir := t.TempDir()
	bundle, err := webhookcert.Issue([]string{"127.0.0.1"}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(webhookcert.DirStore{Dir: certDir}.Save(ctx, nil, bundle)).To(Succeed())
	ca := bundle.CACert
	env.StartManager(t, func(o *setup.Options) {
		chartDefaults(o)
		o.Controllers = nil
		for _, n := range setup.ControllerNames() {
			o.Controllers = append(o.Controllers, "-"+n)
		}
		o.ShardKey = "lockdown-webhook-" + a.NS
		o.GitOps.CacheDir = t.TempDir()
		o.GitOps.Lockdown = true
		o.GitOps.DefaultServiceAccount = ""
		o.Webhook = setup.WebhookOptions{Host: "127.0.0.1", Port: port, CertDir: certDir, Hosts: []string{"127.0.0.1"}}
	})
	url := fmt.Sprintf("https://127.0.0.1:%d/validate-gitops-converge-dev-v1alpha1-sync", port)
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "lockdown-" + a.NS},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "lockdown.sync.gitops.converge.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: a.NS}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{gitopsv1alpha1.GroupVersion.Group},
					APIVersions: []string{gitopsv1alpha1.GroupVersion.Version}, Resources: []string{"syncs"}},
			}},
		}}}
	g.Expect(env.Client.Create(ctx, vwc)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), vwc) })

	sy := tenantSync(a, "no-identity", "app")
	sy.Spec.ServiceAccountName = ""
	// The API server picks up a new webhook configuration (and the manager
	// starts serving) within moments.
	testenv.Eventually(g, func(g Gomega) {
		err := a.Client.Create(ctx, sy.DeepCopy())
		g.Expect(err).To(MatchError(ContainSubstring("spec.serviceAccountName: Required value")))
		g.Expect(err).To(MatchError(ContainSubstring("create rolebinding")))
	}).Should(Succeed())
	err = env.Client.Get(ctx, client.ObjectKeyFromObject(sy), &gitopsv1alpha1.Sync{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the refused Sync exists: %v", err)

	sy.Spec.ServiceAccountName = tenantSA
	g.Expect(a.Client.Create(ctx, sy)).To(Succeed(), "a Sync naming its ServiceAccount is admitted")
}
