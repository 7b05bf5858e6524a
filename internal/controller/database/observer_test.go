package database_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// metricValue reads a counter or gauge of the manager's registry (the
// manager runs in this process); ok is false when the series is absent.
func metricValue(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

func snapshots(t *testing.T, instance string) float64 {
	v, _ := metricValue(t, "converge_database_snapshots_total", map[string]string{"instance": instance, "result": "ok"})
	return v
}

func detected(t *testing.T, instance string) float64 {
	v, _ := metricValue(t, "converge_database_drift_detected_total", map[string]string{"instance": instance})
	return v
}

// TestBatchedObservationCorrectsDrift: with no reconcile requested (the
// full resync is 10 minutes away), the instance's observer finds each
// out-of-band change in its snapshot and the queued reconcile corrects it:
// a dropped database, revoked privileges, an owner that may not log in
// (NOLOGIN, ACCOUNT LOCK) and a dropped role (MariaDB) or another owner
// (PostgreSQL).
func TestBatchedObservationCorrectsDrift(t *testing.T) {
	testenv.Need(t, env)
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
			g := NewWithT(t)
			ns := env.NewNamespace(t)
			createInstance(t, e, ns, "server", 0)
			instance := ns + "/" + e.kind + "/server"
			d := newDatabase(ns, "observed", e.kind, "server")
			dbName := "obs_" + strings.ReplaceAll(ns[len(ns)-5:], "-", "_")
			owner := dbName + "_o"
			d.Spec.DatabaseName, d.Spec.Owner = dbName, owner
			d.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
			g.Expect(env.Tenant.Create(t.Context(), d)).To(Succeed())
			waitReady(t, d)
			pg := e.name == "postgres"

			corrected := func(kind, drift string, stmts ...string) {
				t.Helper()
				// Let two more snapshots pass first: a reconcile queued twice
				// for the previous drift (a snapshot taken while it was being
				// corrected) must not be the one that corrects this one.
				settled := snapshots(t, instance) + 2
				testenv.Eventually(g, func(g Gomega) {
					g.Expect(snapshots(t, instance)).To(BeNumerically(">=", settled))
				}).WithTimeout(30 * time.Second).Should(Succeed())
				before, found := driftCount(t, kind), detected(t, instance)
				e.srv.Exec(t, "", stmts...)
				testenv.Eventually(g, func(g Gomega) {
					g.Expect(driftCount(t, kind)).To(BeNumerically(">", before), "%s corrected (%s)", drift, kind)
					g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
					g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.ReadyCondition)).To(BeTrue())
				}).WithTimeout(30 * time.Second).Should(Succeed())
				g.Expect(detected(t, instance)).To(BeNumerically(">", found), "the observer, not a resync, found %s", drift)
				g.Expect(d.Annotations).NotTo(HaveKey(sqlv1alpha1.ReconcileRequestedAtAnnotation))
			}

			if pg {
				corrected(sqlv1alpha1.DriftDatabaseRecreated, "DROP DATABASE", `DROP DATABASE "`+dbName+`" WITH (FORCE)`)
				corrected(sqlv1alpha1.DriftPrivilegesGranted, "REVOKE", `REVOKE ALL ON DATABASE "`+dbName+`" FROM PUBLIC, "`+owner+`"`)
				corrected(sqlv1alpha1.DriftPrivilegesGranted, "ALTER DATABASE OWNER", `ALTER DATABASE "`+dbName+`" OWNER TO CURRENT_USER`)
				corrected(sqlv1alpha1.DriftPasswordReset, "NOLOGIN", `ALTER ROLE "`+owner+`" NOLOGIN`)
			} else {
				corrected(sqlv1alpha1.DriftDatabaseRecreated, "DROP DATABASE", "DROP DATABASE `"+dbName+"`")
				corrected(sqlv1alpha1.DriftPrivilegesGranted, "REVOKE", "REVOKE ALL PRIVILEGES ON `"+strings.ReplaceAll(dbName, "_", "\\_")+"`.* FROM '"+owner+"'@'%'")
				corrected(sqlv1alpha1.DriftPasswordReset, "ACCOUNT LOCK", "ALTER USER '"+owner+"'@'%' ACCOUNT LOCK")
				corrected(sqlv1alpha1.DriftRoleRecreated, "DROP USER", "DROP USER '"+owner+"'@'%'")
			}
			// The login correction says why the owner could not log in, and
			// the owner logs in again with the Secret's credentials.
			sec := connectionSecret(t, d)
			g.Expect(sqlengine.CheckLogin(t.Context(), e.srv.Config(sec["username"], sec["password"], sec["database"]))).To(Succeed())
			// The metric counts a correction before the reconcile writes its
			// status: read the status until it shows all four.
			testenv.Eventually(g, func(g Gomega) {
				g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
				g.Expect(d.Status.DriftCorrections).To(BeNumerically(">=", 4))
			}).Should(Succeed())
		})
	}
}

// TestOneObserverPerInstance: two Databases on one instance share one
// observer (the gauge stays exactly 1 over several snapshots); deleting the
// Databases and the instance stops it and removes its series.
func TestOneObserverPerInstance(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0]
	sqltest.Need(t, e.srv, sqlengine.Postgres)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	createInstance(t, e, ns, "shared", 0)
	instance := ns + "/" + e.kind + "/shared"
	var dbs []*sqlv1alpha1.Database
	for _, n := range []string{"one", "two"} {
		d := newDatabase(ns, n, e.kind, "shared")
		d.Spec.DatabaseName = n + "_" + strings.ReplaceAll(ns[len(ns)-5:], "-", "_")
		d.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
		g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
		dbs = append(dbs, d)
	}
	for _, d := range dbs {
		waitReady(t, d)
	}
	start := snapshots(t, instance)
	testenv.Eventually(g, func(g Gomega) {
		n, ok := metricValue(t, "converge_database_observers", map[string]string{"instance": instance})
		g.Expect(ok).To(BeTrue())
		g.Expect(n).To(Equal(1.0))
		g.Expect(snapshots(t, instance)).To(BeNumerically(">=", start+3))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(detected(t, instance)).To(BeZero(), "nothing drifted")

	for _, d := range dbs {
		g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
		waitGone(t, d)
	}
	inst := &sqlv1alpha1.PostgresInstance{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, inst)).To(Succeed())
	g.Expect(env.Tenant.Delete(ctx, inst)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		_, ok := metricValue(t, "converge_database_observers", map[string]string{"instance": instance})
		g.Expect(ok).To(BeFalse(), "the observer stopped with its instance")
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestUnprovisionedIsNotDrift: a Database that never became Ready (its
// database exists on the server and is someone else's) is not drift to the
// observer: only established Databases are compared with the snapshot, so
// it is not queued again and again.
func TestUnprovisionedIsNotDrift(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0]
	sqltest.Need(t, e.srv, sqlengine.Postgres)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	createInstance(t, e, ns, "mixed", 0)
	instance := ns + "/" + e.kind + "/mixed"
	suffix := strings.ReplaceAll(ns[len(ns)-5:], "-", "_")
	ready := newDatabase(ns, "ready", e.kind, "mixed")
	ready.Spec.DatabaseName = "ready_" + suffix
	g.Expect(env.Tenant.Create(ctx, ready)).To(Succeed())
	waitReady(t, ready)

	foreign := "foreign_" + suffix
	e.srv.Exec(t, "", `CREATE DATABASE "`+foreign+`"`)
	stalled := newDatabase(ns, "stalled", e.kind, "mixed")
	stalled.Spec.DatabaseName = foreign
	g.Expect(env.Tenant.Create(ctx, stalled)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(stalled), stalled)).To(Succeed())
		c := meta.FindStatusCondition(stalled.Status.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(sqlv1alpha1.DatabaseNotOwnedReason))
	}).Should(Succeed())
	start := snapshots(t, instance)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(snapshots(t, instance)).To(BeNumerically(">=", start+3))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(detected(t, instance)).To(BeZero(), "the stalled Database is not drift")
}
