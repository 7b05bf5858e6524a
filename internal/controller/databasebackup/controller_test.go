package databasebackup_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupv1alpha1 "github.com/converge-dev/converge/api/backup/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/databasebackup"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// restoreInto creates a Database restoring from the backup and returns the
// checksum of its rows once Ready.
func restoreInto(t *testing.T, e engineCase, ns, name, dbName, backup string) string {
	t.Helper()
	g := NewWithT(t)
	r := newDatabase(ns, name, dbName, e)
	r.Annotations = nil
	r.Spec.RestoreFrom = &sqlv1alpha1.LocalObjectReference{Name: backup}
	g.Expect(env.Client.Create(t.Context(), r)).To(Succeed())
	waitReady(t, r)
	g.Expect(r.Status.RestoredFrom).To(Equal(backup))
	// The restored objects belong to the new owner.
	sec := secret(t, r)
	db, err := sqlengine.OpenDB(e.srv.Config(sec["username"], sec["password"], sec["database"]))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = db.Close() }()
	_, err = db.ExecContext(t.Context(), "INSERT INTO items VALUES (100000, 'owner can write', 1)")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = db.ExecContext(t.Context(), "DELETE FROM items WHERE id = 100000")
	g.Expect(err).NotTo(HaveOccurred())
	return checksum(t, e, dbName)
}

// TestBackupBeforeDeleteThenRestore: deleting an annotated Database dumps it
// before the Database controller drops it; a new Database restoring from
// the DatabaseBackup has the same rows.
func TestBackupBeforeDeleteThenRestore(t *testing.T) {
	testenv.Need(t, env)
	startBackupController(t, backupDir)
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
			g := NewWithT(t)
			ctx := t.Context()
			ns := env.NewNamespace(t)
			createInstance(t, e, ns)
			d := newDatabase(ns, "shop", "shop_"+e.name, e)
			g.Expect(env.Client.Create(ctx, d)).To(Succeed())
			waitReady(t, d)
			testenv.Eventually(g, func(g Gomega) {
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
				g.Expect(d.Finalizers).To(ContainElements(backupv1alpha1.BeforeDeleteFinalizer, sqlv1alpha1.DatabaseFinalizer))
			}).Should(Succeed())
			fill(t, e, d, 500)
			want := checksum(t, e, "shop_"+e.name)

			g.Expect(env.Client.Delete(ctx, d)).To(Succeed())
			waitGone(t, d)
			g.Expect(dbExists(t, e.srv, "shop_"+e.name)).To(BeFalse(), "dropped after the dump")

			bs := backups(t, ns)
			g.Expect(bs).To(HaveLen(1))
			b := bs[0]
			g.Expect(b.Name).To(Equal(databasebackup.BackupName(d)))
			g.Expect(b.Status.Phase).To(Equal(backupv1alpha1.BackupCompleted))
			g.Expect(b.Status.Engine).To(Equal(e.name))
			g.Expect(b.Status.SizeBytes).To(BeNumerically(">", 0))
			g.Expect(b.Status.CompletionTime).NotTo(BeNil())
			g.Expect(b.Spec.DatabaseRef.UID).To(Equal(string(d.UID)))
			tool := "pg_dump"
			if e.name == "mariadb" {
				tool = "mariadb-dump"
			}
			g.Expect(b.Status.Tool).To(ContainSubstring(tool))
			sum, err := sqlengine.FileSHA256(filepath.Join(backupDir, b.Status.Location))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sum).To(Equal(b.Status.SHA256))
			g.Expect(hasEvent(t, ns, backupv1alpha1.CompletedReason, "Dumped database")).To(BeTrue())

			g.Expect(restoreInto(t, e, ns, "shop-restored", "shop_restored_"+e.name, b.Name)).To(Equal(want), "the restore gives back the same rows")
		})
	}
}

// TestDumpFailureBlocksTheDrop: while the dump fails (here: the backup
// store is not a directory) the database is not dropped, and the Database's
// status and Events name the blocking finalizer and the error. The skip
// annotation releases it, with a warning.
func TestDumpFailureBlocksTheDrop(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0]
	sqltest.Need(t, e.srv, sqlengine.Postgres)
	g := NewWithT(t)
	ctx := t.Context()
	notADir := filepath.Join(t.TempDir(), "file")
	g.Expect(os.WriteFile(notADir, []byte("x"), 0o600)).To(Succeed())
	startBackupController(t, filepath.Join(notADir, "backups"))

	ns := env.NewNamespace(t)
	createInstance(t, e, ns)
	d := newDatabase(ns, "precious", "precious", e)
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Finalizers).To(ContainElement(backupv1alpha1.BeforeDeleteFinalizer))
	}).Should(Succeed())
	fill(t, e, d, 10)

	g.Expect(env.Client.Delete(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, backupv1alpha1.BackupBeforeDeleteCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(backupv1alpha1.DumpFailedReason))
		g.Expect(c.Message).To(ContainSubstring("finalizer backup.converge.dev/before-delete blocks the deletion"))
		g.Expect(c.Message).To(ContainSubstring("not a directory"))
		del := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.DeletingCondition)
		g.Expect(del).NotTo(BeNil())
		g.Expect(del.Reason).To(Equal(sqlv1alpha1.WaitingForFinalizersReason))
		g.Expect(del.Message).To(ContainSubstring(backupv1alpha1.BeforeDeleteFinalizer))
		g.Expect(hasEvent(t, ns, backupv1alpha1.DumpFailedReason, "not a directory")).To(BeTrue())
	}).Should(Succeed())
	g.Consistently(func() bool { return dbExists(t, e.srv, "precious") }).WithTimeout(2*time.Second).Should(BeTrue(), "a failing dump never lets the database be dropped")
	g.Expect(checksum(t, e, "precious")).NotTo(BeEmpty())

	// The escape hatch.
	base := d.DeepCopy()
	d.Annotations[backupv1alpha1.SkipAnnotation] = "true"
	g.Expect(env.Client.Patch(ctx, d, client.MergeFrom(base))).To(Succeed())
	waitGone(t, d)
	g.Expect(dbExists(t, e.srv, "precious")).To(BeFalse())
	g.Expect(hasEvent(t, ns, backupv1alpha1.SkippedReason, "NOT backed up")).To(BeTrue())
}

// TestManagerKilledBetweenDumpAndDrop: the manager dies after recording the
// dump and before releasing the finalizer. Nothing is dropped meanwhile; on
// restart the completed DatabaseBackup is found and verified, no second dump
// is taken, and the data restores intact.
func TestManagerKilledBetweenDumpAndDrop(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[1]
	sqltest.Need(t, e.srv, sqlengine.MariaDB)
	g := NewWithT(t)
	ctx := t.Context()
	reached := make(chan struct{}, 1)
	kill := startHookedBackupController(t, backupDir, func(ctx context.Context) error {
		select {
		case reached <- struct{}{}:
		default:
		}
		<-ctx.Done() // the process is gone from here on
		return ctx.Err()
	})
	ns := env.NewNamespace(t)
	createInstance(t, e, ns)
	d := newDatabase(ns, "ledger", "ledger", e)
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Finalizers).To(ContainElement(backupv1alpha1.BeforeDeleteFinalizer))
	}).Should(Succeed())
	fill(t, e, d, 200)
	want := checksum(t, e, "ledger")

	g.Expect(env.Client.Delete(ctx, d)).To(Succeed())
	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		t.Fatal("the dump was not recorded")
	}
	kill()

	bs := backups(t, ns)
	g.Expect(bs).To(HaveLen(1))
	first := bs[0]
	g.Expect(first.Status.Phase).To(Equal(backupv1alpha1.BackupCompleted))
	path := filepath.Join(backupDir, first.Status.Location)
	st1, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Consistently(func() bool { return dbExists(t, e.srv, "ledger") }).WithTimeout(2*time.Second).Should(BeTrue(), "nothing is dropped while the finalizer stays")

	startBackupController(t, backupDir) // the restarted manager
	waitGone(t, d)
	g.Expect(dbExists(t, e.srv, "ledger")).To(BeFalse())

	bs = backups(t, ns)
	g.Expect(bs).To(HaveLen(1), "no second DatabaseBackup")
	g.Expect(bs[0].Status.CompletionTime.Time).To(BeTemporally("==", first.Status.CompletionTime.Time), "no second dump")
	g.Expect(bs[0].Status.SHA256).To(Equal(first.Status.SHA256))
	st2, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st2.ModTime()).To(Equal(st1.ModTime()), "the dump file was not rewritten")

	g.Expect(restoreInto(t, e, ns, "ledger-restored", "ledger_restored", first.Name)).To(Equal(want), "no data lost")
}

// TestNeverProvisionedDatabaseIsNotHeldUp: nothing to back up and nothing
// to drop when the instance never existed; the deletion completes.
func TestNeverProvisionedDatabaseIsNotHeldUp(t *testing.T) {
	testenv.Need(t, env)
	startBackupController(t, backupDir)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	d := newDatabase(ns, "phantom", "phantom", engineCase{name: "postgres", kind: "PostgresInstance"})
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Finalizers).To(ContainElements(backupv1alpha1.BeforeDeleteFinalizer, sqlv1alpha1.DatabaseFinalizer))
	}).Should(Succeed())
	g.Expect(env.Client.Delete(ctx, d)).To(Succeed())
	waitGone(t, d)
	g.Expect(hasEvent(t, ns, backupv1alpha1.DatabaseGoneReason, "never provisioned")).To(BeTrue())
}
