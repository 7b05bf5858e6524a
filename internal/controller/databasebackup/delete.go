package databasebackup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupv1alpha1 "github.com/converge-dev/converge/api/backup/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/pkg/contract/databaseinstance"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// reconcileDelete takes the dump (or finds it taken) and then releases the
// finalizer. Every failure keeps the finalizer, says why on the Database's
// BackupBeforeDelete condition and in an Event, and is retried.
func (r *Reconciler) reconcileDelete(ctx context.Context, d *sqlv1alpha1.Database) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if d.Annotations[backupv1alpha1.SkipAnnotation] == "true" {
		log.Info("Skipping the backup before delete: the skip annotation is set", "annotation", backupv1alpha1.SkipAnnotation)
		msg := fmt.Sprintf("annotation %s=true: the database was NOT backed up before deletion", backupv1alpha1.SkipAnnotation)
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, backupv1alpha1.SkippedReason, "Backup", "%s", msg)
		if err := r.setCondition(ctx, d, metav1.ConditionTrue, backupv1alpha1.SkippedReason, msg); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.setFinalizer(ctx, d, false)
	}
	b, err := r.ensureBackup(ctx, d)
	if err != nil {
		return ctrl.Result{}, err
	}
	if b.Status.Phase == backupv1alpha1.BackupCompleted {
		err := r.verify(b)
		if err == nil {
			log.Info("Found the completed dump; not dumping again", "DatabaseBackup", b.Name)
			return r.release(ctx, d, b)
		}
		log.Info("Recorded dump is unusable; dumping again", "DatabaseBackup", b.Name, "problem", err.Error())
	}
	return r.dump(ctx, d, b)
}

// ensureBackup gets or creates the DatabaseBackup record (phase Running).
func (r *Reconciler) ensureBackup(ctx context.Context, d *sqlv1alpha1.Database) (*backupv1alpha1.DatabaseBackup, error) {
	b := &backupv1alpha1.DatabaseBackup{}
	key := types.NamespacedName{Namespace: d.Namespace, Name: BackupName(d)}
	err := r.Get(ctx, key, b)
	if err == nil {
		return b, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading DatabaseBackup %s: %w", key.Name, err)
	}
	b = &backupv1alpha1.DatabaseBackup{
		// Not owned by the Database: the backup outlives it.
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{sqlv1alpha1.DatabaseLabel: d.Name}},
		Spec: backupv1alpha1.DatabaseBackupSpec{DatabaseRef: backupv1alpha1.DatabaseReference{
			Name: d.Name, UID: string(d.UID), DatabaseName: databaseName(d)}},
	}
	if err := r.Create(ctx, b, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("creating DatabaseBackup %s: %w", key.Name, err)
	}
	return b, nil
}

func databaseName(d *sqlv1alpha1.Database) string {
	switch {
	case d.Status.DatabaseName != "":
		return d.Status.DatabaseName
	case d.Spec.DatabaseName != "":
		return d.Spec.DatabaseName
	}
	return d.Name
}

// verify checks that a completed dump's file is present and unchanged.
func (r *Reconciler) verify(b *backupv1alpha1.DatabaseBackup) error {
	if !filepath.IsLocal(b.Status.Location) {
		return fmt.Errorf("location %q is not inside the backup store", b.Status.Location)
	}
	sum, err := sqlengine.FileSHA256(filepath.Join(r.BackupDir, b.Status.Location))
	if err != nil {
		return err
	}
	if sum != b.Status.SHA256 {
		return fmt.Errorf("the file's SHA-256 is %s, the record says %s", sum, b.Status.SHA256)
	}
	return nil
}

// dump takes the dump and records it; on success it releases the finalizer.
func (r *Reconciler) dump(ctx context.Context, d *sqlv1alpha1.Database, b *backupv1alpha1.DatabaseBackup) (ctrl.Result, error) {
	cfg, version, found, err := r.connection(ctx, d)
	neverProvisioned := !d.Status.AtProvider.Exists && d.Status.AtProvider.ObservedTime == nil
	if err != nil && !neverProvisioned {
		return ctrl.Result{}, r.blocked(ctx, d, b, "InstanceUnavailable", err)
	}
	// A Database never observed on its server, whose server cannot be
	// reached either, has nothing to back up; it must not block forever.
	if !found {
		// Nothing on the server to lose: the database never existed or is
		// already gone.
		msg := fmt.Sprintf("database %q does not exist on the server; there is nothing to back up", cfg.Database)
		if err != nil {
			msg = fmt.Sprintf("database %q was never provisioned and its server cannot be reached (%v); there is nothing to back up", cfg.Database, err)
		}
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, backupv1alpha1.DatabaseGoneReason, "Backup", "%s", msg)
		if err := r.patchBackup(ctx, b, func(st *backupv1alpha1.DatabaseBackupStatus) {
			st.Phase = backupv1alpha1.BackupFailed
			reconcile.MarkTrue(&st.Conditions, b.Generation, backupv1alpha1.FailedCondition, backupv1alpha1.DatabaseGoneReason, msg)
		}); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.setCondition(ctx, d, metav1.ConditionTrue, backupv1alpha1.DatabaseGoneReason, msg); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.setFinalizer(ctx, d, false)
	}
	rel := filepath.Join(d.Namespace, b.Name+".sql")
	now := metav1.Now()
	if err := r.patchBackup(ctx, b, func(st *backupv1alpha1.DatabaseBackupStatus) {
		st.Phase, st.StartTime, st.Engine, st.ServerVersion, st.Location = backupv1alpha1.BackupRunning, &now, string(cfg.Engine), version, rel
		reconcile.MarkFalse(&st.Conditions, b.Generation, backupv1alpha1.ReadyCondition, backupv1alpha1.DumpingReason, "dumping")
		// A new attempt after a failed dump: no longer Failed (nor
		// Stalled, which kstatus would read Failed while it runs).
		reconcile.Remove(&st.Conditions, backupv1alpha1.FailedCondition)
	}); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.setCondition(ctx, d, metav1.ConditionFalse, backupv1alpha1.DumpingReason,
		fmt.Sprintf("dumping database %q to DatabaseBackup %q before the Database is deleted", cfg.Database, b.Name)); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Dumping database before delete", "database", cfg.Database, "DatabaseBackup", b.Name)
	dctx, cancel := context.WithTimeout(ctx, r.Timeout)
	res, err := r.Dump(dctx, r.Tools, cfg, version, filepath.Join(r.BackupDir, rel))
	cancel()
	if err != nil {
		dumps.WithLabelValues("failed").Inc()
		return ctrl.Result{}, r.blocked(ctx, d, b, backupv1alpha1.DumpFailedReason, err)
	}
	dumps.WithLabelValues("completed").Inc()
	done := metav1.Now()
	if err := r.patchBackup(ctx, b, func(st *backupv1alpha1.DatabaseBackupStatus) {
		st.Phase, st.CompletionTime, st.SizeBytes, st.SHA256, st.Tool = backupv1alpha1.BackupCompleted, &done, res.SizeBytes, res.SHA256, res.Tool
		reconcile.MarkTrue(&st.Conditions, b.Generation, backupv1alpha1.ReadyCondition, backupv1alpha1.CompletedReason,
			fmt.Sprintf("%d bytes, sha256 %s", res.SizeBytes, res.SHA256))
		reconcile.Remove(&st.Conditions, backupv1alpha1.FailedCondition)
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.Recorder.Eventf(d, b, corev1.EventTypeNormal, backupv1alpha1.CompletedReason, "Backup",
		"Dumped database %q to %s (%d bytes, sha256 %s) with %s", cfg.Database, rel, res.SizeBytes, res.SHA256, res.Tool)
	return r.release(ctx, d, b)
}

// release removes the finalizer once the dump is recorded.
func (r *Reconciler) release(ctx context.Context, d *sqlv1alpha1.Database, b *backupv1alpha1.DatabaseBackup) (ctrl.Result, error) {
	if r.beforeRelease != nil {
		if err := r.beforeRelease(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.setCondition(ctx, d, metav1.ConditionTrue, backupv1alpha1.CompletedReason,
		fmt.Sprintf("backed up to DatabaseBackup %q (sha256 %s)", b.Name, b.Status.SHA256)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.setFinalizer(ctx, d, false)
}

// blocked records why the deletion waits: on the DatabaseBackup, on the
// Database's status, in an Event. It returns the error so the queue retries
// with backoff.
func (r *Reconciler) blocked(ctx context.Context, d *sqlv1alpha1.Database, b *backupv1alpha1.DatabaseBackup, reason string, cause error) error {
	msg := fmt.Sprintf("finalizer %s blocks the deletion: %v", backupv1alpha1.BeforeDeleteFinalizer, cause)
	r.Recorder.Eventf(d, b, corev1.EventTypeWarning, reason, "Backup", "%s", reconcile.Truncate(msg, reconcile.MaxMessageBytes))
	errs := []error{cause}
	errs = append(errs, r.patchBackup(ctx, b, func(st *backupv1alpha1.DatabaseBackupStatus) {
		st.Phase = backupv1alpha1.BackupFailed
		msg := reconcile.Truncate(cause.Error(), reconcile.MaxMessageBytes)
		reconcile.MarkTrue(&st.Conditions, b.Generation, backupv1alpha1.FailedCondition, reason, msg)
		reconcile.MarkFalse(&st.Conditions, b.Generation, backupv1alpha1.ReadyCondition, reason, msg)
	}))
	errs = append(errs, r.setCondition(ctx, d, metav1.ConditionFalse, reason, msg))
	return errors.Join(errs...)
}

// setCondition sets this controller's condition on the Database's status
// through the kit's StatusPatcher: nothing is sent when the condition is
// already so, and on a conflict (the Database controller wrote meanwhile)
// only this condition is re-applied to the fresh Database, so the Database
// controller's conditions survive.
func (r *Reconciler) setCondition(ctx context.Context, d *sqlv1alpha1.Database, status metav1.ConditionStatus, reason, msg string) error {
	p := reconcile.NewStatusPatcher(r.Client, d)
	reconcile.SetCondition(&d.Status.Conditions, d.Generation, backupv1alpha1.BackupBeforeDeleteCondition, status, reason, reconcile.Truncate(msg, reconcile.MaxMessageBytes))
	if err := p.Patch(ctx, d); err != nil {
		return fmt.Errorf("patching the Database status: %w", err)
	}
	return nil
}

// patchBackup applies f to the DatabaseBackup's status and writes it
// through the kit's StatusPatcher (nothing is sent when f changed nothing).
func (r *Reconciler) patchBackup(ctx context.Context, b *backupv1alpha1.DatabaseBackup, f func(*backupv1alpha1.DatabaseBackupStatus)) error {
	p := reconcile.NewStatusPatcher(r.Client, b)
	f(&b.Status)
	// A failed dump is terminal: Stalled mirrors Failed, so kstatus reads
	// it Failed.
	reconcile.MirrorStalled(&b.Status.Conditions, b.Generation, backupv1alpha1.FailedCondition)
	if err := p.Patch(ctx, b); err != nil {
		return fmt.Errorf("patching DatabaseBackup %s: %w", b.Name, err)
	}
	return nil
}

// connection reads the instance through the contract and returns the admin
// connection to the database, the server version, and whether the database
// exists on the server.
func (r *Reconciler) connection(ctx context.Context, d *sqlv1alpha1.Database) (sqlengine.Config, string, bool, error) {
	cfg := sqlengine.Config{Database: databaseName(d), Egress: r.Egress}
	gv, err := schema.ParseGroupVersion(d.Spec.InstanceRef.APIVersion)
	if err != nil {
		return cfg, "", false, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gv.WithKind(d.Spec.InstanceRef.Kind))
	if err := r.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: d.Spec.InstanceRef.Name}, u); err != nil {
		return cfg, "", false, fmt.Errorf("reading %s %q: %w", d.Spec.InstanceRef.Kind, d.Spec.InstanceRef.Name, err)
	}
	st, err := databaseinstance.Read(u)
	if err != nil {
		return cfg, "", false, err
	}
	if !st.Ready {
		return cfg, "", false, fmt.Errorf("%s %q is not ready", d.Spec.InstanceRef.Kind, d.Spec.InstanceRef.Name)
	}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: st.AdminSecretName}, sec); err != nil {
		return cfg, "", false, fmt.Errorf("reading the admin Secret: %w", err)
	}
	cfg.Engine, cfg.Host, cfg.Port = sqlengine.Engine(st.Engine), st.Host, st.Port
	cfg.User, cfg.Password = string(sec.Data[databaseinstance.UsernameKey]), string(sec.Data[databaseinstance.PasswordKey])
	cfg.TLSMode = sqlengine.TLSRequire // the default when an instance kind says nothing
	if mode, _, _ := unstructured.NestedString(u.Object, "spec", "tls", "mode"); mode != "" {
		cfg.TLSMode = sqlengine.TLSMode(mode)
	}
	if caName, _, _ := unstructured.NestedString(u.Object, "spec", "tls", "caSecretRef", "name"); caName != "" {
		ca := &corev1.Secret{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: caName}, ca); err != nil {
			return cfg, "", false, fmt.Errorf("reading the CA Secret %q: %w", caName, err)
		}
		cfg.CAPEM = ca.Data["ca.crt"] // pg_dump verify-full / mariadb-dump --ssl-verify-server-cert
	}
	admin := cfg
	admin.Database, admin.MaxConns = "", 1
	db, err := sqlengine.OpenDB(admin)
	if err != nil {
		return cfg, "", false, err
	}
	defer func() { _ = db.Close() }()
	srv := sqlengine.NewServer(admin, db)
	version, err := srv.Ping(ctx)
	if err != nil {
		return cfg, "", false, fmt.Errorf("connecting to %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	info, err := srv.Database(ctx, cfg.Database)
	if err != nil {
		return cfg, "", false, err
	}
	return cfg, version, info.Exists, nil
}
