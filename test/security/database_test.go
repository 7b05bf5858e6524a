package security

import (
	"errors"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// startServer starts a throwaway server (with TLS, as sqltest does) for one
// test, or skips loudly outside CI when it is not installed.
func startServer(t *testing.T, e sqlengine.Engine) *sqltest.Server {
	t.Helper()
	start := sqltest.StartPostgres
	if e == sqlengine.MariaDB {
		start = sqltest.StartMariaDB
	}
	srv, err := start(t.Context())
	var me *sqltest.MissingError
	if errors.As(err, &me) && os.Getenv("CI") == "" {
		t.Skipf("*** SKIPPING: %v ***", err)
	}
	if err != nil {
		t.Fatalf("starting %s: %v", e, err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// foreign is what exists on the shared server before the tenant arrives:
// someone else's database with data and its login role, a plain role, a
// role that may create roles, and an unmarked legacy database the tenant
// may adopt on purpose.
func seedForeign(t *testing.T, srv *sqltest.Server) {
	t.Helper()
	if srv.Engine == sqlengine.Postgres {
		srv.Exec(t, "",
			"CREATE ROLE payroll_app LOGIN PASSWORD 'payroll-pw'",
			"CREATE DATABASE payroll OWNER payroll_app",
			"CREATE ROLE reporting LOGIN PASSWORD 'reporting-pw'",
			"CREATE ROLE ops LOGIN CREATEROLE PASSWORD 'ops-pw'",
			"CREATE DATABASE legacy")
		srv.Exec(t, "payroll", "CREATE TABLE salaries (name text, amount int)", "INSERT INTO salaries VALUES ('ceo', 1000000)")
		srv.Exec(t, "legacy", "CREATE TABLE items (id int)", "INSERT INTO items VALUES (1)")
		return
	}
	srv.Exec(t, "",
		"CREATE DATABASE payroll",
		"CREATE TABLE payroll.salaries (name text, amount int)",
		"INSERT INTO payroll.salaries VALUES ('ceo', 1000000)",
		"CREATE USER 'payroll_app'@'%' IDENTIFIED BY 'payroll-pw'",
		"GRANT ALL PRIVILEGES ON payroll.* TO 'payroll_app'@'%'",
		"CREATE USER 'reporting'@'%' IDENTIFIED BY 'reporting-pw'",
		"CREATE USER 'ops'@'%' IDENTIFIED BY 'ops-pw'",
		"GRANT CREATE USER ON *.* TO 'ops'@'%'",
		"CREATE DATABASE legacy",
		"CREATE TABLE legacy.items (id int)",
		"INSERT INTO legacy.items VALUES (1)")
}

// serverState is everything outside the tenant that an attack could
// change: the foreign data, who owns it, what is written on it, and that
// every foreign account still logs in with its old password.
type serverState struct {
	Salaries, Items int
	PayrollOwner    string
	PayrollComment  string
	Logins          map[string]bool
}

func observe(t *testing.T, srv *sqltest.Server) serverState {
	t.Helper()
	ctx := t.Context()
	db := srv.Open(t, "")
	st := serverState{Logins: map[string]bool{}}
	count := func(dbName, table string) int {
		var n int
		q := "SELECT COUNT(*) FROM " + dbName + "." + table
		conn := db
		if srv.Engine == sqlengine.Postgres {
			conn, q = srv.Open(t, dbName), "SELECT COUNT(*) FROM "+table
		}
		if err := conn.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("counting %s.%s: %v", dbName, table, err)
		}
		return n
	}
	st.Salaries, st.Items = count("payroll", "salaries"), count("legacy", "items")
	if srv.Engine == sqlengine.Postgres {
		if err := db.QueryRowContext(ctx, "SELECT pg_get_userbyid(datdba), COALESCE(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = 'payroll'").
			Scan(&st.PayrollOwner, &st.PayrollComment); err != nil {
			t.Fatal(err)
		}
	} else if err := db.QueryRowContext(ctx, "SELECT SCHEMA_COMMENT FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'payroll'").Scan(&st.PayrollComment); err != nil {
		t.Fatal(err)
	}
	for user, pw := range map[string]string{srv.AdminUser: srv.AdminPassword, "payroll_app": "payroll-pw", "reporting": "reporting-pw", "ops": "ops-pw"} {
		st.Logins[user] = sqlengine.CheckLogin(ctx, srv.Config(user, pw, "")) == nil
	}
	return st
}

func roleExistsOn(t *testing.T, srv *sqltest.Server, name string) bool {
	t.Helper()
	q := "SELECT COUNT(*) FROM pg_roles WHERE rolname = $1"
	if srv.Engine == sqlengine.MariaDB {
		q = "SELECT COUNT(*) FROM mysql.user WHERE User = ?"
	}
	var n int
	if err := srv.Open(t, "").QueryRowContext(t.Context(), q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestDatabaseTakeoverIsRefused: a tenant with an instance on a shared
// server tries to take over what it did not create: an existing database
// with someone else's data (then deletes its Database with deletionPolicy
// Delete), the instance's admin user and a CREATEROLE role as owner (even
// with adoptExisting), and an existing plain role as owner. Every attempt
// stalls with a reason that names it, and afterwards the foreign data, its
// owner and marker, and every foreign password are exactly as before.
// Adopting an unmarked plain database on purpose works.
func TestDatabaseTakeoverIsRefused(t *testing.T) {
	testenv.Need(t, env)
	for _, e := range []struct {
		engine sqlengine.Engine
		kind   string
	}{{sqlengine.Postgres, "PostgresInstance"}, {sqlengine.MariaDB, "MariaDBInstance"}} {
		t.Run(string(e.engine), func(t *testing.T) {
			srv := startServer(t, e.engine)
			seedForeign(t, srv)
			before := observe(t, srv)
			for u, ok := range before.Logins {
				if !ok {
					t.Fatalf("seeding: %s cannot log in", u)
				}
			}
			tn := newTenant(t)
			ctx := t.Context()
			g := NewWithT(t)
			// The cluster admin hands the tenant the server: its admin Secret
			// in the tenant's namespace. The tenant creates the instance.
			g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "shared-admin"},
				StringData: map[string]string{"username": srv.AdminUser, "password": srv.AdminPassword}})).To(Succeed())
			spec := sqlv1alpha1.InstanceSpec{Host: srv.Host, Port: int32(srv.Port), AdminSecretRef: sqlv1alpha1.SecretReference{Name: "shared-admin"}}
			var inst client.Object = &sqlv1alpha1.PostgresInstance{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "shared"}, Spec: spec}
			if e.engine == sqlengine.MariaDB {
				inst = &sqlv1alpha1.MariaDBInstance{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "shared"}, Spec: spec}
			}
			g.Expect(tn.Client.Create(ctx, inst)).To(Succeed())

			attack := func(name, dbName, owner string, adopt bool) *sqlv1alpha1.Database {
				d := &sqlv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name}, Spec: sqlv1alpha1.DatabaseSpec{
					InstanceRef:  sqlv1alpha1.InstanceReference{APIVersion: sqlv1alpha1.GroupVersion.String(), Kind: e.kind, Name: "shared"},
					DatabaseName: dbName, Owner: owner, AdoptExisting: adopt, DeletionPolicy: sqlv1alpha1.DeletionDelete,
				}}
				g.Expect(tn.Client.Create(ctx, d)).To(Succeed())
				return d
			}
			expectStalled := func(d *sqlv1alpha1.Database, reason, msg string) {
				t.Helper()
				testenv.Eventually(g, func(g Gomega) {
					g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
					ready := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
					g.Expect(ready).NotTo(BeNil())
					g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
					g.Expect(ready.Reason).To(Equal(reason), ready.Message)
					g.Expect(ready.Message).To(ContainSubstring(msg))
					stalled := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.StalledCondition)
					g.Expect(stalled).NotTo(BeNil())
					g.Expect(stalled.Reason).To(Equal(reason))
				}).WithTimeout(60 * time.Second).Should(Succeed())
			}

			takeover := attack("payroll", "payroll", "", false)
			expectStalled(takeover, sqlv1alpha1.DatabaseNotOwnedReason, "Set spec.adoptExisting: true")
			grabAdmin := attack("grab-admin", "grab_admin", srv.AdminUser, true)
			expectStalled(grabAdmin, sqlv1alpha1.PrivilegedRoleReason, "is the instance's admin user")
			grabOps := attack("grab-ops", "grab_ops", "ops", true)
			expectStalled(grabOps, sqlv1alpha1.PrivilegedRoleReason, "CREATE")
			grabRole := attack("grab-role", "grab_role", "reporting", false)
			expectStalled(grabRole, sqlv1alpha1.RoleNotOwnedReason, `role "reporting" already exists`)
			g.Expect(roleExistsOn(t, srv, "payroll_owner")).To(BeFalse(), "nothing was created for the refused takeover")
			g.Expect(observe(t, srv)).To(Equal(before), "nothing outside the tenant changed")

			// Deleting the refused Databases (deletionPolicy Delete) drops
			// nothing that is not theirs.
			for _, d := range []*sqlv1alpha1.Database{takeover, grabAdmin, grabOps, grabRole} {
				g.Expect(tn.Client.Delete(ctx, d)).To(Succeed())
			}
			for _, d := range []*sqlv1alpha1.Database{takeover, grabAdmin, grabOps, grabRole} {
				testenv.Eventually(g, func(g Gomega) {
					err := tn.Client.Get(ctx, client.ObjectKeyFromObject(d), &sqlv1alpha1.Database{})
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "deleted: %v", err)
				}).WithTimeout(60 * time.Second).Should(Succeed())
			}
			g.Expect(observe(t, srv)).To(Equal(before), "nothing outside the tenant changed after the deletes")

			// Adopting an unmarked, unprivileged database is allowed when
			// asked for; its data stays.
			legacy := attack("legacy", "legacy", "", true)
			testenv.Eventually(g, func(g Gomega) {
				g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(legacy), legacy)).To(Succeed())
				ready := meta.FindStatusCondition(legacy.Status.Conditions, sqlv1alpha1.ReadyCondition)
				g.Expect(ready).NotTo(BeNil())
				g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "%s: %s", ready.Reason, ready.Message)
			}).WithTimeout(60 * time.Second).Should(Succeed())
			after := observe(t, srv)
			g.Expect(after.Items).To(Equal(1), "the adopted database keeps its data")
			g.Expect(after.Salaries).To(Equal(before.Salaries))
		})
	}
}
