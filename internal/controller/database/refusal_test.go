package database_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// The tests in this file make the server itself refuse something the
// controller asks for, and check the reason a person is shown for each.

// readyReason waits for Ready=False with the reason and a message holding
// every want, and returns the condition.
func readyReason(t *testing.T, d *sqlv1alpha1.Database, reason string, want ...string) *metav1.Condition {
	t.Helper()
	g := NewWithT(t)
	var c *metav1.Condition
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
		c = meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(reason), "Ready: %s: %s", c.Reason, c.Message)
		for _, w := range want {
			g.Expect(c.Message).To(ContainSubstring(w))
		}
	}).Should(Succeed())
	return c
}

// TestOwnerLoginRefusedIsLoginFailed: the owner's password is right, but the
// server refuses the login for a reason a password reset does not cure (an
// expired password on PostgreSQL, an account that requires a client certificate on MariaDB,
// neither of which the controller changes). The Database says LoginFailed
// naming the role, not Ready=True; once the server allows the login again it
// is Ready.
func TestOwnerLoginRefusedIsLoginFailed(t *testing.T) {
	testenv.Need(t, env)
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
			g := NewWithT(t)
			ctx := t.Context()
			ns := env.NewNamespace(t)
			createInstance(t, e, ns, "server", 0)
			d := newDatabase(ns, "locked", e.kind, "server")
			d.Spec.DatabaseName = "locked_" + e.name
			g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
			waitReady(t, d)
			owner := d.Status.Owner
			g.Expect(owner).NotTo(BeEmpty())

			lock, unlock := fmt.Sprintf("ALTER ROLE %q VALID UNTIL '2000-01-01'", owner), fmt.Sprintf("ALTER ROLE %q VALID UNTIL 'infinity'", owner)
			if e.srv.Engine == sqlengine.MariaDB {
				lock, unlock = fmt.Sprintf("ALTER USER '%s'@'%%' REQUIRE X509", owner), fmt.Sprintf("ALTER USER '%s'@'%%' REQUIRE NONE", owner)
			}
			e.srv.Exec(t, "", lock)
			t.Cleanup(func() { bestEffort(t, e.srv, unlock) })
			requestReconcile(t, d)
			c := readyReason(t, d, sqlv1alpha1.LoginFailedReason, fmt.Sprintf("role %q cannot log in", owner), "even after its password was reset")
			g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.StalledCondition)).To(BeNil(), "a server-side refusal may be lifted: retried, not stalled (%s)", c.Message)

			e.srv.Exec(t, "", unlock)
			requestReconcile(t, d)
			waitReady(t, d)
		})
	}
}

// TestStatementRefusedIsProvisionFailed: an instance whose admin may log in
// but may not create databases or roles is Ready (its credentials work),
// and a Database on it says ProvisionFailed with the server's own refusal,
// creating nothing. Granting the rights lets the same Database finish.
func TestStatementRefusedIsProvisionFailed(t *testing.T) {
	testenv.Need(t, env)
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
			g := NewWithT(t)
			ctx := t.Context()
			ns := env.NewNamespace(t)
			weak, pw := "weak_admin_"+e.name, "Weak-"+strings.ReplaceAll(ns, "-", "")
			create := []string{fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", weak, pw)}
			grant := []string{fmt.Sprintf("ALTER ROLE %s CREATEDB CREATEROLE", weak)}
			drop := []string{fmt.Sprintf("DROP ROLE IF EXISTS %s", weak)}
			if e.srv.Engine == sqlengine.MariaDB {
				create = []string{fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", weak, pw)}
				grant = []string{fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION", weak)}
				drop = []string{fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", weak)}
			}
			e.srv.Exec(t, "", create...)
			// Leftovers on these throwaway servers are harmless (unique
			// names); the role is dropped when nothing depends on it.
			t.Cleanup(func() { bestEffort(t, e.srv, drop...) })

			g.Expect(env.Tenant.Create(ctx, &corev1.Secret{ObjectMeta: objMeta(ns, "weak-admin"),
				StringData: map[string]string{"username": weak, "password": pw}})).To(Succeed())
			spec := sqlv1alpha1.InstanceSpec{Host: "127.0.0.1", Port: int32(e.srv.Port), AdminSecretRef: sqlv1alpha1.SecretReference{Name: "weak-admin"}}
			var inst client.Object = &sqlv1alpha1.PostgresInstance{ObjectMeta: objMeta(ns, "weak"), Spec: spec}
			if e.srv.Engine == sqlengine.MariaDB {
				inst = &sqlv1alpha1.MariaDBInstance{ObjectMeta: objMeta(ns, "weak"), Spec: spec}
			}
			g.Expect(env.Tenant.Create(ctx, inst)).To(Succeed())

			d := newDatabase(ns, "refused", e.kind, "weak")
			d.Spec.DatabaseName = "refused_" + e.name
			d.Spec.Owner = "refused_" + e.name + "_owner"
			g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
			denied := "permission denied" // PostgreSQL: permission denied to create role / database
			if e.srv.Engine == sqlengine.MariaDB {
				denied = "denied" // MariaDB: Access denied for user / CREATE USER command denied
			}
			readyReason(t, d, sqlv1alpha1.ProvisionFailedReason, denied)
			g.Expect(dbExists(t, e.srv, d.Spec.DatabaseName)).To(BeFalse())
			g.Expect(roleExists(t, e.srv, d.Spec.Owner)).To(BeFalse(), "a refused provisioning leaves nothing half-made")

			e.srv.Exec(t, "", grant...)
			// MariaDB applies global grants to new sessions: the pool
			// reconnects within sqlengine.ConnMaxLifetime, then the retry
			// (backoff, or this nudge) finishes the Database.
			testenv.Eventually(g, func(g Gomega) {
				requestReconcile(t, d)
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
				g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.ReadyCondition)).To(BeTrue())
			}).WithTimeout(sqlengine.ConnMaxLifetime + 30*time.Second).WithPolling(5 * time.Second).Should(Succeed())
			g.Expect(dbExists(t, e.srv, d.Spec.DatabaseName)).To(BeTrue())
		})
	}
}

// TestDropRefusedIsShownAsDropping: deletionPolicy Delete, and the server
// refuses the DROP (the database was made a template meanwhile). The
// finalizer stays, the database stays, and the Deleting condition says
// Dropping with the server's refusal; once the server allows it, it goes.
func TestDropRefusedIsShownAsDropping(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0]
	sqltest.Need(t, e.srv, sqlengine.Postgres)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	createInstance(t, e, ns, "server", 0)
	d := newDatabase(ns, "template", e.kind, "server")
	d.Spec.DatabaseName = "made_template"
	d.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	e.srv.Exec(t, "", "ALTER DATABASE made_template IS_TEMPLATE true")
	t.Cleanup(func() { bestEffort(t, e.srv, "ALTER DATABASE made_template IS_TEMPLATE false") })

	g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.DeletingCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(sqlv1alpha1.DroppingReason))
		g.Expect(c.Message).To(ContainSubstring("dropping failed"))
		g.Expect(c.Message).To(ContainSubstring("template database"))
	}).Should(Succeed())
	g.Expect(d.Finalizers).To(ContainElement(sqlv1alpha1.DatabaseFinalizer))
	g.Expect(dbExists(t, e.srv, "made_template")).To(BeTrue())

	e.srv.Exec(t, "", "ALTER DATABASE made_template IS_TEMPLATE false")
	requestReconcile(t, d)
	waitGone(t, d) // a failed drop is retried with backoff
	g.Expect(dbExists(t, e.srv, "made_template")).To(BeFalse())
}

// bestEffort runs cleanup statements as the admin, ignoring errors (the
// test may have failed before the object they undo existed).
func bestEffort(t *testing.T, srv *sqltest.Server, stmts ...string) {
	db, err := sqlengine.OpenDB(srv.Admin())
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer func() { _ = db.Close() }()
	for _, st := range stmts {
		if _, err := db.ExecContext(context.Background(), st); err != nil {
			t.Logf("cleanup: %s: %v", st, err)
		}
	}
}
