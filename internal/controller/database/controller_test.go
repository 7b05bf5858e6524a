package database_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestProvisionOnBothEnginesWithOneSpec: the same Database spec (only the
// instanceRef differs) provisions on PostgreSQL and MariaDB, the connection
// Secret has the same keys, and the real clients log in with it.
func TestProvisionOnBothEnginesWithOneSpec(t *testing.T) {
	testenv.Need(t, env)
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
			g := NewWithT(t)
			ns := env.NewNamespace(t)
			createInstance(t, e, ns, "server", 0)
			d := newDatabase(ns, "orders", e.kind, "server")
			g.Expect(env.Tenant.Create(t.Context(), d)).To(Succeed())
			g.Expect(d.Spec.DatabaseName).To(Equal("orders"), "defaulted by the webhook")
			g.Expect(d.Spec.Owner).To(Equal("orders_owner"))
			g.Expect(d.Spec.DeletionPolicy).To(Equal(sqlv1alpha1.DeletionRetain))
			waitReady(t, d)
			synced := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.SyncedCondition)
			g.Expect(synced).NotTo(BeNil())
			g.Expect(synced.Reason).To(Equal(sqlv1alpha1.UpToDateReason), "a fresh database has nothing to correct")
			g.Expect(d.Status.Engine).To(Equal(e.name))
			g.Expect(d.Status.AtProvider.Exists).To(BeTrue())
			g.Expect(d.Status.AtProvider.Owner).To(Equal("orders_owner"))
			g.Expect(d.Finalizers).To(Equal([]string{sqlv1alpha1.DatabaseFinalizer}))
			// Later passes (a label change brings one) keep one finalizer:
			// it is added only to a live Database that lacks it.
			g.Expect(env.Client.Patch(t.Context(), d, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"pass":"2"}}}`)))).To(Succeed())
			g.Consistently(func(g Gomega) {
				cur := &sqlv1alpha1.Database{}
				g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), cur)).To(Succeed())
				g.Expect(cur.Finalizers).To(Equal([]string{sqlv1alpha1.DatabaseFinalizer}))
			}).WithTimeout(2 * time.Second).Should(Succeed())

			sec := connectionSecret(t, d)
			g.Expect(sec).To(HaveKeyWithValue("host", "127.0.0.1"))
			g.Expect(sec).To(HaveKeyWithValue("database", "orders"))
			g.Expect(sec).To(HaveKeyWithValue("username", "orders_owner"))
			g.Expect(sec).To(HaveKey("port"))
			g.Expect(sec["password"]).To(HaveLen(32))
			g.Expect(sec).To(HaveKey("uri"))
			owned := &corev1.Secret{}
			g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "orders-connection"}, owned)).To(Succeed())
			g.Expect(owned.OwnerReferences).To(HaveLen(1))
			g.Expect(owned.OwnerReferences[0].UID).To(Equal(d.UID))

			// The real command-line client, with nothing but the Secret.
			var cmd *exec.Cmd
			if e.name == "postgres" {
				g.Expect(sec["uri"]).To(HavePrefix("postgresql://orders_owner:"))
				cmd = exec.CommandContext(t.Context(), "psql", "--no-psqlrc", "-qtAc", "CREATE TABLE t (id int); SELECT current_user || '@' || current_database()", sec["uri"])
			} else {
				g.Expect(sec["uri"]).To(HavePrefix("mysql://orders_owner:"))
				cmd = exec.CommandContext(t.Context(), "mariadb", "--no-defaults", "--protocol=TCP", "-h", sec["host"], "-P", sec["port"],
					"-u", sec["username"], "-D", sec["database"], "-N", "-e", "CREATE TABLE t (id int); SELECT CONCAT(SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '@', DATABASE())")
				cmd.Env = append(os.Environ(), "MYSQL_PWD="+sec["password"])
			}
			out, err := cmd.CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), "%s", out)
			g.Expect(strings.TrimSpace(string(out))).To(Equal("orders_owner@orders"))
		})
	}
}

// TestAdmissionRejectsUnsafeIdentifiers: names that would be SQL injection
// are refused with a message that says why; extensions are refused for a
// MariaDBInstance.
func TestAdmissionRejectsUnsafeIdentifiers(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	cases := map[string]struct {
		mutate func(*sqlv1alpha1.Database)
		want   string
	}{
		"injection in databaseName": {func(d *sqlv1alpha1.Database) { d.Spec.DatabaseName = `x"; DROP DATABASE postgres; --` }, "this looks like SQL, not an identifier"},
		"backtick in owner":         {func(d *sqlv1alpha1.Database) { d.Spec.Owner = "o`; DROP USER root; --" }, "spec.owner"},
		"reserved name":             {func(d *sqlv1alpha1.Database) { d.Spec.DatabaseName = "template1" }, "reserved by the database server"},
		"extension with a quote":    {func(d *sqlv1alpha1.Database) { d.Spec.Extensions = []string{`hstore"; --`} }, "spec.extensions[0]"},
		"metadata.name with a dot":  {func(d *sqlv1alpha1.Database) { d.Name = "a.b" }, "set spec.databaseName"},
		"extensions on MariaDB": {func(d *sqlv1alpha1.Database) {
			d.Spec.InstanceRef.Kind = "MariaDBInstance"
			d.Spec.Extensions = []string{"hstore"}
		}, "extensions are a PostgreSQL feature"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			d := newDatabase(ns, "x", "PostgresInstance", "server")
			c.mutate(d)
			err := env.Tenant.Create(t.Context(), d)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(c.want))
		})
	}
	t.Run("immutable databaseName", func(t *testing.T) {
		g := NewWithT(t)
		d := newDatabase(ns, "immutable", "PostgresInstance", "server")
		g.Expect(env.Tenant.Create(t.Context(), d)).To(Succeed())
		base := d.DeepCopy()
		d.Spec.DatabaseName = "other"
		err := env.Tenant.Patch(t.Context(), d, client.MergeFrom(base))
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("field is immutable"))
	})
}

// TestDriftIsCorrected: a database dropped out of band is recreated (and
// the condition says it is empty), a changed password is reset, revoked
// privileges are granted again; each is in status and in the metric.
func TestDriftIsCorrected(t *testing.T) {
	testenv.Need(t, env)
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
			g := NewWithT(t)
			ns := env.NewNamespace(t)
			createInstance(t, e, ns, "server", 0)
			d := newDatabase(ns, "drift-"+e.name, e.kind, "server")
			// Unique per run: -count=N reuses the servers.
			dbName := "drift_" + strings.ReplaceAll(ns[len(ns)-5:], "-", "_")
			owner := dbName + "_o"
			d.Spec.DatabaseName, d.Spec.Owner = dbName, owner
			d.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
			g.Expect(env.Tenant.Create(t.Context(), d)).To(Succeed())
			waitReady(t, d)
			expectCorrection := func(kind string, msg string) {
				t.Helper()
				testenv.Eventually(g, func(g Gomega) {
					g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
					g.Expect(d.Status.LastDriftCorrected).NotTo(BeNil(), "status: %+v", d.Status)
					g.Expect(d.Status.LastDriftCorrected.Kind).To(Equal(kind))
					g.Expect(d.Status.LastDriftCorrected.Message).To(ContainSubstring(msg))
					g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.ReadyCondition)).To(BeTrue(),
						"Ready: %+v", meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition))
					// 90 s: under make test's -race load a MariaDB correction
					// once took longer than the default 30 s.
				}).WithTimeout(90 * time.Second).Should(Succeed())
			}
			count := func(kind string) float64 { return driftCount(t, kind) }

			// 1. Dropped out of band.
			before := count(sqlv1alpha1.DriftDatabaseRecreated)
			if e.name == "postgres" {
				e.srv.Exec(t, "", `DROP DATABASE "`+dbName+`" WITH (FORCE)`)
			} else {
				e.srv.Exec(t, "", "DROP DATABASE `"+dbName+"`")
			}
			requestReconcile(t, d)
			expectCorrection(sqlv1alpha1.DriftDatabaseRecreated, "recreated empty; no DatabaseBackup of it exists")
			g.Expect(dbExists(t, e.srv, dbName)).To(BeTrue())
			synced := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.SyncedCondition)
			if synced.Reason == sqlv1alpha1.DriftCorrectedReason { // until the next observation
				g.Expect(synced.Message).To(ContainSubstring("recreated empty"))
			}
			g.Expect(count(sqlv1alpha1.DriftDatabaseRecreated)).To(BeNumerically(">", before))
			testenv.Eventually(g, func(g Gomega) {
				evs := &corev1.EventList{}
				g.Expect(env.Client.List(t.Context(), evs, client.InNamespace(ns))).To(Succeed())
				found := false
				for _, ev := range evs.Items {
					if ev.Reason == sqlv1alpha1.DriftDatabaseRecreated && strings.Contains(ev.Message, "recreated empty") {
						found = true
					}
				}
				g.Expect(found).To(BeTrue(), "an Event says the database was recreated empty")
			}).Should(Succeed())

			// 2. Password changed out of band.
			sec := connectionSecret(t, d)
			if e.name == "postgres" {
				e.srv.Exec(t, "", `ALTER ROLE "`+owner+`" PASSWORD 'changed'`)
			} else {
				e.srv.Exec(t, "", "ALTER USER '"+owner+"'@'%' IDENTIFIED BY 'changed'")
			}
			requestReconcile(t, d)
			expectCorrection(sqlv1alpha1.DriftPasswordReset, "the password was reset")
			g.Expect(sqlengine.CheckLogin(t.Context(), e.srv.Config(sec["username"], sec["password"], sec["database"]))).To(Succeed())

			// 3. Privileges revoked.
			if e.name == "postgres" {
				e.srv.Exec(t, "", `REVOKE ALL ON DATABASE "`+dbName+`" FROM PUBLIC, "`+owner+`"`)
			} else {
				e.srv.Exec(t, "", "REVOKE ALL PRIVILEGES ON `"+strings.ReplaceAll(dbName, "_", "\\_")+"`.* FROM '"+owner+"'@'%'")
			}
			requestReconcile(t, d)
			expectCorrection(sqlv1alpha1.DriftPrivilegesGranted, "granted again")
			g.Expect(d.Status.DriftCorrections).To(BeNumerically(">=", 3))
			db := ownerConn(t, e.srv, sec)
			_, err := db.ExecContext(t.Context(), "CREATE TABLE after_regrant (id int)")
			g.Expect(err).NotTo(HaveOccurred(), "the owner can work in its database again")
		})
	}
}

// driftCount reads converge_database_drift_corrections_total{kind} from the
// manager's registry (the manager runs in this process).
func driftCount(t *testing.T, kind string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "converge_database_drift_corrections_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestDeletingANeverProvisionedDatabase: a Database whose instance never
// existed goes away on delete, even with deletionPolicy Delete.
func TestDeletingANeverProvisionedDatabase(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	d := newDatabase(ns, "orphan", "PostgresInstance", "nowhere")
	d.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
	g.Expect(env.Tenant.Create(t.Context(), d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Finalizers).To(ContainElement(sqlv1alpha1.DatabaseFinalizer))
		g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)).NotTo(BeNil())
	}).Should(Succeed())
	g.Expect(env.Tenant.Delete(t.Context(), d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %v", err)
	}).Should(Succeed())
}
