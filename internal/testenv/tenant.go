package testenv

import (
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/config"
)

// TenantCoreRules is what a namespace's own users usually hold on core kinds
// (a subset of the built-in edit role; the suites run no
// kube-controller-manager to aggregate that one).
var TenantCoreRules = []rbacv1.PolicyRule{{
	APIGroups: []string{""},
	Resources: []string{"configmaps", "secrets", "serviceaccounts", "services", "pods"},
	Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
}}

// InstallTenantRoles applies config/rbac/tenant_roles.yaml (converge-edit
// and converge-view), as the chart and the kustomize bases ship it.
func (e *Environment) InstallTenantRoles(t testing.TB) {
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
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cr)
		if err != nil {
			t.Fatalf("converting ClusterRole %s: %v", cr.Name, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		if err := e.Client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("testenv"), client.ForceOwnership); err != nil {
			t.Fatalf("applying ClusterRole %s: %v", cr.Name, err)
		}
	}
}

// GrantTenant gives ServiceAccount sa of namespace ns the documented tenant
// rights there and nothing else: a RoleBinding to converge-edit, and a Role
// (bound too) with TenantCoreRules plus extra. The ServiceAccount is created
// when missing. It returns the ServiceAccount's user name.
func (e *Environment) GrantTenant(t testing.TB, ns, sa string, extra ...rbacv1.PolicyRule) string {
	t.Helper()
	ctx := t.Context()
	e.InstallTenantRoles(t)
	acct := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}
	core := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa + "-core"},
		Rules: append(append([]rbacv1.PolicyRule{}, TenantCoreRules...), extra...)}
	subj := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}
	objs := []client.Object{acct, core,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa + "-converge-edit"}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "converge-edit"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa + "-core"}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: core.Name}},
	}
	for _, o := range objs {
		if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("granting the tenant %s/%s: creating %T: %v", ns, sa, o, err)
		}
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa)
	// The API server's authorizer learns of new bindings through its own
	// informers: under load a request made right away can still be
	// Forbidden. Wait until both bindings are enforced.
	for _, want := range []authorizationv1.ResourceAttributes{
		{Namespace: ns, Verb: "create", Resource: "secrets"},
		{Namespace: ns, Verb: "create", Group: "sql.converge.dev", Resource: "databases"},
	} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}, ResourceAttributes: &want}}
			if err := e.Client.Create(ctx, sar); err != nil {
				t.Fatalf("granting the tenant %s/%s: reviewing %s %s: %v", ns, sa, want.Verb, want.Resource, err)
			}
			if sar.Status.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("granting the tenant %s/%s: %s %s still not allowed after 30s: %s", ns, sa, want.Verb, want.Resource, sar.Status.Reason)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return user
}
