package security

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// tenant is one team: a namespace, a ServiceAccount in it, and a client that
// acts as that ServiceAccount. Its only rights are the documented ones:
// converge-edit (config/rbac/tenant_roles.yaml) plus what the built-in edit
// role gives on core kinds (testenv.TenantCoreRules), both bound by
// RoleBindings in its namespace (testenv.GrantTenant).
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

// newTenant makes a tenant with a fresh namespace, removed after the test.
// Its ServiceAccount is also what the tenant's Syncs name in
// serviceAccountName, so they can do exactly what the tenant can. extra are
// further rules of the built-in edit role a test needs (say, reading Events).
func newTenant(t *testing.T, extra ...rbacv1.PolicyRule) *tenant {
	t.Helper()
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	user := env.GrantTenant(t, ns, tenantSA, extra...)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatalf("building the tenant's client: %v", err)
	}
	return &tenant{NS: ns, User: user, Client: c, Config: cfg}
}

// tenantSA is the name of every tenant's ServiceAccount.
const tenantSA = "tenant"

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
