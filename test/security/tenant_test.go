package security

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/config"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// tenant is one team: a namespace, a ServiceAccount in it, and a client that
// acts as that ServiceAccount. Its only rights are the documented ones:
// converge-edit (config/rbac/tenant_roles.yaml) plus what the built-in edit
// role gives on core kinds, both bound by RoleBindings in its namespace.
type tenant struct {
	// NS is the tenant's namespace.
	NS string
	// User is the ServiceAccount's user name.
	User string
	// Client acts as the tenant (impersonation by the admin config).
	Client client.Client
	// Config is the impersonating REST config behind Client.
	Config *rest.Config
}

// coreTenantRules is what a namespace's own users usually hold on core kinds
// (a subset of the built-in edit role; the suite runs no
// kube-controller-manager to aggregate that one).
var coreTenantRules = []rbacv1.PolicyRule{{
	APIGroups: []string{""},
	Resources: []string{"configmaps", "secrets", "serviceaccounts", "services", "pods"},
	Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
}}

// newTenant makes a tenant with a fresh namespace, removed after the test.
func newTenant(t *testing.T) *tenant {
	t.Helper()
	testenv.Need(t, env)
	ctx := t.Context()
	installTenantRoles(t)
	ns := env.NewNamespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"}}
	core := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-core"}, Rules: coreTenantRules}
	subj := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}}
	bindings := []*rbacv1.RoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-converge-edit"}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "converge-edit"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-core"}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: core.Name}},
	}
	for _, o := range []client.Object{sa, core, bindings[0], bindings[1]} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating the tenant's %T: %v", o, err)
		}
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa.Name)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatalf("building the tenant's client: %v", err)
	}
	return &tenant{NS: ns, User: user, Client: c, Config: cfg}
}

// installTenantRoles applies config/rbac/tenant_roles.yaml, as the chart and
// the kustomize bases ship it.
func installTenantRoles(t *testing.T) {
	t.Helper()
	data, err := config.Manifests.ReadFile("rbac/tenant_roles.yaml")
	if err != nil {
		t.Fatalf("reading the tenant roles: %v", err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		cr := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict([]byte(doc), cr); err != nil {
			t.Fatalf("decoding the tenant roles: %v", err)
		}
		cr.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind("ClusterRole"))
		if err := env.Client.Patch(t.Context(), cr, client.Apply, client.FieldOwner("security-test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying ClusterRole %s: %v", cr.Name, err)
		}
	}
}

// TestTenantHasOnlyNamespaceRights checks the harness itself: the tenant can
// use Converge's kinds in its namespace and nothing in another one.
func TestTenantHasOnlyNamespaceRights(t *testing.T) {
	a, b := newTenant(t), newTenant(t)
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: a.NS, Name: "mine"}}
	if err := a.Client.Create(ctx, cm); err != nil {
		t.Fatalf("a tenant cannot create a ConfigMap in its own namespace: %v", err)
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.NS, Name: "theirs"}}
	if err := a.Client.Create(ctx, other); err == nil {
		t.Fatal("a tenant created a ConfigMap in another tenant's namespace")
	}
	if err := a.Client.List(ctx, &corev1.SecretList{}, client.InNamespace("kube-system")); err == nil {
		t.Fatal("a tenant listed Secrets in kube-system")
	}
}
