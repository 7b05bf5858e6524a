package databasebackup_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
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
	g.Expect(env.Tenant.Create(t.Context(), r)).To(Succeed())
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
			g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
			waitReady(t, d)
			testenv.Eventually(g, func(g Gomega) {
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
				g.Expect(d.Finalizers).To(ContainElements(backupv1alpha1.BeforeDeleteFinalizer, sqlv1alpha1.DatabaseFinalizer))
			}).Should(Succeed())
			fill(t, e, d, 500)
			want := checksum(t, e, "shop_"+e.name)

			g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
			waitGone(t, d)
			g.Expect(dbExists(t, e.srv, "shop_"+e.name)).To(BeFalse(), "dropped after the dump")

			bs := backups(t, ns)
			g.Expect(bs).To(HaveLen(1))
			b := bs[0]
			g.Expect(b.Name).To(Equal(databasebackup.BackupName(d)))
			g.Expect(b.Status.Phase).To(Equal(backupv1alpha1.BackupCompleted))
			testenv.ExpectKstatus(ctx, g, env.Client, &b, kstatus.CurrentStatus, "")
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
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Finalizers).To(ContainElement(backupv1alpha1.BeforeDeleteFinalizer))
	}).Should(Succeed())
	fill(t, e, d, 10)

	g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
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
		// Between attempts the backup is Failed for kstatus.
		testenv.ExpectKstatus(ctx, g, env.Client, &backupv1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: databasebackup.BackupName(d)}},
			kstatus.FailedStatus, backupv1alpha1.DumpFailedReason)
	}).Should(Succeed())
	waitHeld(t, d)
	g.Expect(dbExists(t, e.srv, "precious")).To(BeTrue(), "a failing dump never lets the database be dropped")
	g.Expect(checksum(t, e, "precious")).NotTo(BeEmpty())

	// The escape hatch.
	base := d.DeepCopy()
	d.Annotations[backupv1alpha1.SkipAnnotation] = "true"
	g.Expect(env.Tenant.Patch(ctx, d, client.MergeFrom(base))).To(Succeed())
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
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Finalizers).To(ContainElement(backupv1alpha1.BeforeDeleteFinalizer))
	}).Should(Succeed())
	fill(t, e, d, 200)
	want := checksum(t, e, "ledger")

	g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
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
	waitHeld(t, d)
	g.Expect(dbExists(t, e.srv, "ledger")).To(BeTrue(), "nothing is dropped while the finalizer stays")

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
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Finalizers).To(ContainElements(backupv1alpha1.BeforeDeleteFinalizer, sqlv1alpha1.DatabaseFinalizer))
	}).Should(Succeed())
	g.Expect(env.Tenant.Delete(ctx, d)).To(Succeed())
	waitGone(t, d)
	g.Expect(hasEvent(t, ns, backupv1alpha1.DatabaseGoneReason, "never provisioned")).To(BeTrue())
}

// TestRestoreFailed: a Database whose restoreFrom cannot be loaded is
// Ready=False RestoreFailed with a message saying which backup and why, and
// loads nothing: the backup is missing; is another engine's dump; points
// outside the manager's backup store; its file was removed; or its file no
// longer has the recorded checksum (refused before the load, the file left
// as it was). status.restoredFrom stays empty.
func TestRestoreFailed(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0] // postgres: the engine is not what these guards check
	sqltest.Need(t, e.srv, sqlengine.Engine(e.name))
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	createInstance(t, e, ns)

	// A real file in the store whose recorded checksum does not match.
	changed := "restore-failed-" + ns + ".sql"
	g.Expect(os.WriteFile(filepath.Join(backupDir, changed), []byte("-- not what was dumped\n"), 0o600)).To(Succeed())
	t.Cleanup(func() { _ = os.Remove(filepath.Join(backupDir, changed)) })
	backup := func(name, engine, location string) {
		b := &backupv1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: backupv1alpha1.DatabaseBackupSpec{DatabaseRef: backupv1alpha1.DatabaseReference{Name: "gone"}}}
		// Forged records stand for the controller's own writes: tenants
		// may only read DatabaseBackups.
		g.Expect(env.Client.Create(ctx, b)).To(Succeed())
		b.Status = backupv1alpha1.DatabaseBackupStatus{Phase: backupv1alpha1.BackupCompleted, Engine: engine, Location: location,
			SHA256: strings.Repeat("0", 64), CompletionTime: &metav1.Time{Time: time.Now()}}
		g.Expect(env.Client.Status().Update(ctx, b)).To(Succeed())
	}
	backup("other-engine", "mariadb", changed)
	backup("outside", e.name, "../outside.sql")
	backup("removed", e.name, "removed-"+ns+".sql")
	backup("changed", e.name, changed)

	for i, tc := range []struct {
		backup  string
		stalled bool
		want    string
	}{
		{"missing", false, `DatabaseBackup "missing" does not exist`},
		{"other-engine", true, `DatabaseBackup "other-engine" is a mariadb dump; this database is on postgres`},
		{"outside", true, `DatabaseBackup "outside" location "../outside.sql" is not in this manager's backup store`},
		{"removed", false, `loading DatabaseBackup "removed"`},
		{"changed", false, "refusing to load a changed file"},
	} {
		dbName := fmt.Sprintf("restore_failed_%d", i)
		d := newDatabase(ns, "r-"+tc.backup, dbName, e)
		d.Annotations = nil
		d.Spec.RestoreFrom = &sqlv1alpha1.LocalObjectReference{Name: tc.backup}
		g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
		testenv.Eventually(g, func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
			ready := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(sqlv1alpha1.RestoreFailedReason), ready.Message)
			g.Expect(ready.Message).To(ContainSubstring(tc.want))
			g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.StalledCondition)).To(Equal(tc.stalled), "stalled")
		}).WithTimeout(60 * time.Second).Should(Succeed())
		g.Expect(d.Status.RestoredFrom).To(BeEmpty(), "%s: nothing was restored", tc.backup)
		if tc.backup == "changed" {
			g.Expect(os.ReadFile(filepath.Join(backupDir, changed))).To(Equal([]byte("-- not what was dumped\n")), "the file is left as it was")
		}
	}
}

// waitHeld waits until the Database controller has handled d's deletion (the
// deletion bumped the generation; its Deleting condition is at that
// generation) and found the backup finalizer still there: from then on, a
// database that still exists was not dropped by that reconcile, rather than
// by luck of timing.
func waitHeld(t *testing.T, d *sqlv1alpha1.Database) {
	t.Helper()
	g := NewWithT(t)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.DeletionTimestamp).NotTo(BeNil())
		g.Expect(d.Finalizers).To(ContainElement(backupv1alpha1.BeforeDeleteFinalizer))
		c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.DeletingCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(sqlv1alpha1.WaitingForFinalizersReason))
		g.Expect(c.ObservedGeneration).To(Equal(d.Generation), "the Database controller saw the deletion")
	}).Should(Succeed())
}
