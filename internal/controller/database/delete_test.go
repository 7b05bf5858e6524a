package database_test

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

func waitGone(t *testing.T, d *sqlv1alpha1.Database) {
	t.Helper()
	g := NewWithT(t)
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), &sqlv1alpha1.Database{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %v", err)
	}).Should(Succeed())
}

func hasEvent(t *testing.T, ns, reason, substr string) bool {
	t.Helper()
	evs := &corev1.EventList{}
	if err := env.Client.List(t.Context(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == reason && strings.Contains(ev.Message, substr) {
			return true
		}
	}
	return false
}

// TestRetainKeepsAndDeleteDropsWithOpenConnections: Retain drops nothing
// and says so; Delete terminates open connections (one inside a
// transaction) and drops the database and the role.
func TestRetainKeepsAndDeleteDropsWithOpenConnections(t *testing.T) {
	testenv.Need(t, env)
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
			g := NewWithT(t)
			ctx := t.Context()
			ns := env.NewNamespace(t)
			createInstance(t, e, ns, "server", 0)

			kept := newDatabase(ns, "kept", e.kind, "server")
			kept.Spec.DatabaseName = "kept_" + e.name
			g.Expect(env.Tenant.Create(ctx, kept)).To(Succeed())
			dropped := newDatabase(ns, "dropped", e.kind, "server")
			dropped.Spec.DatabaseName = "dropped_" + e.name
			dropped.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
			g.Expect(env.Tenant.Create(ctx, dropped)).To(Succeed())
			waitReady(t, kept)
			waitReady(t, dropped)

			// Open connections as the owner, one in an open transaction.
			conn := ownerConn(t, e.srv, connectionSecret(t, dropped))
			_, err := conn.ExecContext(ctx, "CREATE TABLE t (id int)")
			g.Expect(err).NotTo(HaveOccurred())
			tx, err := conn.BeginTx(ctx, nil)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = tx.ExecContext(ctx, "INSERT INTO t VALUES (1)")
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = tx.Rollback() }()

			g.Expect(env.Tenant.Delete(ctx, kept)).To(Succeed())
			g.Expect(env.Tenant.Delete(ctx, dropped)).To(Succeed())
			waitGone(t, kept)
			waitGone(t, dropped)

			g.Expect(dbExists(t, e.srv, "kept_"+e.name)).To(BeTrue(), "Retain keeps the database")
			g.Expect(roleExists(t, e.srv, "kept_"+e.name+"_owner")).To(BeTrue(), "Retain keeps the role")
			g.Expect(dbExists(t, e.srv, "dropped_"+e.name)).To(BeFalse(), "Delete drops the database")
			g.Expect(roleExists(t, e.srv, "dropped_"+e.name+"_owner")).To(BeFalse(), "Delete drops the role")
			g.Expect(tx.Commit()).To(HaveOccurred(), "the open transaction was terminated")
			testenv.Eventually(g, func(g Gomega) {
				g.Expect(hasEvent(t, ns, sqlv1alpha1.RetainedReason, "kept on the server")).To(BeTrue())
				g.Expect(hasEvent(t, ns, "Dropped", "Terminated connections")).To(BeTrue())
			}).Should(Succeed())
		})
	}
}

// TestDropWaitsForOtherFinalizers: with another controller's finalizer on
// the Database, nothing is dropped and status names the finalizer; once it
// is removed, the database is dropped.
func TestDropWaitsForOtherFinalizers(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0]
	sqltest.Need(t, e.srv, sqlengine.Postgres)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	createInstance(t, e, ns, "server", 0)
	d := newDatabase(ns, "held", e.kind, "server")
	d.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
	d.Finalizers = []string{"example.com/hold"}
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.DeletingCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(sqlv1alpha1.WaitingForFinalizersReason))
		g.Expect(c.Message).To(ContainSubstring("example.com/hold"))
	}).Should(Succeed())
	g.Consistently(func() bool { return dbExists(t, e.srv, "held") }).WithTimeout(2 * time.Second).Should(BeTrue())
	g.Expect(hasEvent(t, ns, sqlv1alpha1.WaitingForFinalizersReason, "example.com/hold")).To(BeTrue())

	base := d.DeepCopy()
	d.Finalizers = []string{sqlv1alpha1.DatabaseFinalizer}
	g.Expect(env.Tenant.Patch(ctx, d, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	waitGone(t, d)
	g.Expect(dbExists(t, e.srv, "held")).To(BeFalse())
}

// TestUnreachableServerLosesNothing: when the server cannot be reached the
// Database is Ready=False with reason InstanceUnavailable, nothing is
// dropped (not even on delete), and it recovers when the server is back.
func TestUnreachableServerLosesNothing(t *testing.T) {
	testenv.Need(t, env)
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
			g := NewWithT(t)
			ctx := t.Context()
			ns := env.NewNamespace(t)
			p := newProxy(t, net.JoinHostPort(e.srv.Host, strconv.Itoa(e.srv.Port)))
			createInstance(t, e, ns, "server", p.port)
			d := newDatabase(ns, "cut", e.kind, "server")
			d.Spec.DatabaseName = "cut_" + e.name
			d.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
			g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
			waitReady(t, d)

			p.cut()
			requestReconcile(t, d)
			testenv.Eventually(g, func(g Gomega) {
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
				c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
				g.Expect(c.Status).To(Equal(metav1False))
				g.Expect(c.Reason).To(Equal(sqlv1alpha1.InstanceUnavailableReason))
				g.Expect(c.Message).To(ContainSubstring(fmt.Sprint(p.port)))
				g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.StalledCondition)).To(BeNil())
			}).Should(Succeed())

			// Deleting while unreachable keeps the finalizer: nothing is
			// dropped blindly and nothing is left behind silently.
			g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
			g.Consistently(func(g Gomega) {
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
			}).WithTimeout(2 * time.Second).Should(Succeed())
			g.Expect(dbExists(t, e.srv, "cut_"+e.name)).To(BeTrue())

			p.restore(t)
			waitGone(t, d)
			g.Expect(dbExists(t, e.srv, "cut_"+e.name)).To(BeFalse(), "dropped once the server is back")
		})
	}
}

// TestInstanceNotReadyWaits: a Database on an instance that is not Ready
// waits and says so.
func TestInstanceNotReadyWaits(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[1]
	sqltest.Need(t, e.srv, sqlengine.MariaDB)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	d := newDatabase(ns, "early", e.kind, "later")
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(sqlv1alpha1.InstanceNotFoundReason))
	}).Should(Succeed())
	// The instance appears, with a wrong password first: not Ready.
	g.Expect(env.Tenant.Create(ctx, &corev1.Secret{ObjectMeta: objMeta(ns, "later-admin"),
		StringData: map[string]string{"username": e.srv.AdminUser, "password": "wrong"}})).To(Succeed())
	inst := &sqlv1alpha1.MariaDBInstance{ObjectMeta: objMeta(ns, "later"), Spec: sqlv1alpha1.InstanceSpec{Host: "127.0.0.1",
		Port: int32(e.srv.Port), AdminSecretRef: sqlv1alpha1.SecretReference{Name: "later-admin"}}}
	g.Expect(env.Tenant.Create(ctx, inst)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(c.Reason).To(Equal(sqlv1alpha1.InstanceNotReadyReason))
		g.Expect(c.Message).To(ContainSubstring(`waiting for MariaDBInstance "later" to be ready`))
	}).Should(Succeed())
	// Fixing the instance wakes the Database (the instance is watched).
	sec := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "later-admin"}, sec)).To(Succeed())
	base := sec.DeepCopy()
	sec.Data["password"] = []byte(e.srv.AdminPassword)
	g.Expect(env.Tenant.Patch(ctx, sec, client.MergeFrom(base))).To(Succeed())
	waitReady(t, d)
}

// TestDeleteKeepsARoleMarkedForAnother: with deletionPolicy Delete the
// database this Database created is dropped, but its owner role, whose
// marker someone changed to name another Database, is kept (it is not
// privileged: the marker alone decides) and a NotOwned Warning names it.
func TestDeleteKeepsARoleMarkedForAnother(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0]
	sqltest.Need(t, e.srv, sqlengine.Postgres)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	createInstance(t, e, ns, "server", 0)
	d := newDatabase(ns, "remarked", e.kind, "server")
	d.Spec.DeletionPolicy = sqlv1alpha1.DeletionDelete
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	other := sqlengine.Claim{UID: "00000000-0000-0000-0000-000000000001", Namespace: "elsewhere", Name: "other"}
	e.srv.Exec(t, "", "COMMENT ON ROLE remarked_owner IS '"+other.String()+"'")
	defer e.srv.Exec(t, "", "DROP ROLE IF EXISTS remarked_owner")
	g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
	waitGone(t, d)
	g.Expect(dbExists(t, e.srv, "remarked")).To(BeFalse(), "the database it created is dropped")
	g.Expect(roleExists(t, e.srv, "remarked_owner")).To(BeTrue(), "a role marked for another Database was dropped")
	g.Expect(hasEvent(t, ns, "NotOwned", `role "remarked_owner"`)).To(BeTrue())
}
