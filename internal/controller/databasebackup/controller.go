// Package databasebackup implements the backup-before-delete controller: a
// second controller that owns one finalizer, backup.converge.dev/before-delete,
// on Databases annotated backup.converge.dev/before-delete: "true". When such
// a Database is deleted it dumps the database with the engine's own dump
// program (pg_dump, mariadb-dump), run by the manager, into the backup store,
// records a DatabaseBackup with the file's SHA-256, and only then removes its
// finalizer; the Database controller drops nothing while this finalizer is
// there. A failed dump keeps the finalizer (and the data). A manager that
// dies between the dump and the finalizer removal finds the completed
// DatabaseBackup on restart and does not dump again.
package databasebackup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	backupv1alpha1 "github.com/converge-dev/converge/api/backup/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "databasebackup"

// FieldManager is the field manager of every write this controller makes.
const FieldManager = "converge-databasebackup"

// +kubebuilder:rbac:groups=sql.converge.dev,resources=databases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sql.converge.dev,resources=databases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sql.converge.dev,resources=postgresinstances;mariadbinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=backup.converge.dev,resources=databasebackups,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=backup.converge.dev,resources=databasebackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

var dumps = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "converge_database_backup_dumps_total",
	Help: "Dumps taken before a Database was deleted, by result (completed, failed).",
}, []string{"result"})

func init() { metrics.Registry.MustRegister(dumps) }

// Dumper takes dumps; sqlengine.Dump is the real one.
type Dumper func(ctx context.Context, t sqlengine.Tools, c sqlengine.Config, serverVersion, path string) (sqlengine.DumpResult, error)

// Reconciler reconciles the backup-before-delete finalizer on Databases.
type Reconciler struct {
	client.Client
	// Egress refuses instance hosts whose address the cluster admin
	// denies (internal/egress); nil refuses nothing.
	Egress *egress.Policy
	// Recorder emits Events; set by SetupWithManager.
	Recorder events.EventRecorder
	// BackupDir is the backup store: dumps are written under it, as
	// <namespace>/<DatabaseBackup name>.sql.
	BackupDir string
	// Tools are the dump programs.
	Tools sqlengine.Tools
	// Dump takes a dump; sqlengine.Dump when nil.
	Dump Dumper
	// Timeout bounds one dump; 30 minutes when zero.
	Timeout time.Duration

	// beforeRelease runs after the DatabaseBackup is recorded and before the
	// finalizer is removed; tests use it to kill the manager there.
	beforeRelease func(ctx context.Context) error
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.BackupDir == "" {
		return errors.New("the backup-before-delete controller needs a backup directory (--backup-dir)")
	}
	r.Client = mgr.GetClient()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	if r.Dump == nil {
		r.Dump = sqlengine.Dump
	}
	if r.Timeout == 0 {
		r.Timeout = 30 * time.Minute
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&sqlv1alpha1.Database{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return o.GetAnnotations()[backupv1alpha1.BeforeDeleteAnnotation] != n.GetAnnotations()[backupv1alpha1.BeforeDeleteAnnotation] ||
				o.GetAnnotations()[backupv1alpha1.SkipAnnotation] != n.GetAnnotations()[backupv1alpha1.SkipAnnotation] ||
				!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
				!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp())
		}})).
		Complete(r)
}

// wanted reports whether a Database asks for a backup before delete.
func wanted(d *sqlv1alpha1.Database) bool {
	return d.Annotations[backupv1alpha1.BeforeDeleteAnnotation] == "true"
}

// Reconcile holds or releases the finalizer on one Database.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	d := &sqlv1alpha1.Database{}
	if err := r.Get(ctx, req.NamespacedName, d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Database", klog.KObj(d)))
	has := slices.Contains(d.Finalizers, backupv1alpha1.BeforeDeleteFinalizer)
	if d.DeletionTimestamp.IsZero() {
		switch {
		case wanted(d) && !has:
			return ctrl.Result{}, r.setFinalizer(ctx, d, true)
		case !wanted(d) && has:
			return ctrl.Result{}, r.setFinalizer(ctx, d, false)
		}
		return ctrl.Result{}, nil
	}
	if !has {
		return ctrl.Result{}, nil
	}
	return r.reconcileDelete(ctx, d)
}

// setFinalizer adds or removes the before-delete finalizer through the
// kit's locked finalizer patches.
func (r *Reconciler) setFinalizer(ctx context.Context, d *sqlv1alpha1.Database, on bool) error {
	if on {
		_, err := reconcile.EnsureFinalizer(ctx, r.Client, d, backupv1alpha1.BeforeDeleteFinalizer)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	return reconcile.RemoveFinalizer(ctx, r.Client, d, backupv1alpha1.BeforeDeleteFinalizer)
}

// BackupName is the DatabaseBackup name for a Database's pre-delete dump:
// deterministic (so a restarted manager finds it) and unique per Database
// UID (so a later Database of the same name gets its own).
func BackupName(d *sqlv1alpha1.Database) string {
	h := sha256.Sum256([]byte(d.UID))
	prefix := d.Name
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return prefix + "-predelete-" + hex.EncodeToString(h[:4])
}
