package databasebackup_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupv1alpha1 "github.com/converge-dev/converge/api/backup/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/databasebackup"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestDumpingIsShownWhileTheDumpRuns: a dump that cannot finish yet (another
// session holds an exclusive lock on a table, so pg_dump waits for it) is
// shown as Dumping on both the DatabaseBackup and the Database, and the
// database is not dropped meanwhile. When the lock goes, the dump completes
// and the deletion finishes.
func TestDumpingIsShownWhileTheDumpRuns(t *testing.T) {
	testenv.Need(t, env)
	startBackupController(t, backupDir)
	e := engines()[0]
	sqltest.Need(t, e.srv, sqlengine.Postgres)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	createInstance(t, e, ns)
	d := newDatabase(ns, "busy", "busy", e)
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Finalizers).To(ContainElement(backupv1alpha1.BeforeDeleteFinalizer))
	}).Should(Succeed())
	fill(t, e, d, 10)

	db, err := sqlengine.OpenDB(e.srv.Config(e.srv.AdminUser, e.srv.AdminPassword, "busy"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = db.Close() }()
	tx, err := db.BeginTx(ctx, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, "LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
	name := databasebackup.BackupName(d)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, backupv1alpha1.BackupBeforeDeleteCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(backupv1alpha1.DumpingReason))
		g.Expect(c.Message).To(ContainSubstring(`dumping database "busy" to DatabaseBackup %q`, name))
		b := &backupv1alpha1.DatabaseBackup{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b)).To(Succeed())
		g.Expect(b.Status.Phase).To(Equal(backupv1alpha1.BackupRunning))
		r := meta.FindStatusCondition(b.Status.Conditions, backupv1alpha1.ReadyCondition)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Reason).To(Equal(backupv1alpha1.DumpingReason))
		testenv.ExpectKstatus(ctx, g, env.Client, b, kstatus.InProgressStatus, backupv1alpha1.DumpingReason)
	}).Should(Succeed())
	g.Consistently(func() bool { return dbExists(t, e.srv, "busy") }).WithTimeout(time.Second).Should(BeTrue(), "not dropped while the dump runs")

	g.Expect(tx.Rollback()).To(Succeed())
	waitGone(t, d)
	g.Expect(dbExists(t, e.srv, "busy")).To(BeFalse())
	bs := backups(t, ns)
	g.Expect(bs).To(HaveLen(1))
	g.Expect(bs[0].Status.Phase).To(Equal(backupv1alpha1.BackupCompleted))
}
