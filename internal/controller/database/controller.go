// Package database implements the Database controller: on any server kind
// that honours the database instance contract (read through
// pkg/contract/databaseinstance from unstructured objects, never the
// providers' Go types) it creates the database and an owner role with a
// generated password, grants privileges, writes the connection Secret, and
// turns Ready only after logging in with those credentials. It touches only
// what it created: each database and role carries a marker on the server
// naming the Database object (its UID) that created it, and one that exists
// without this Database's marker is refused (unless spec.adoptExisting),
// never altered, granted, reset or dropped; a privileged role (the admin, a
// superuser, ...) is never touched at all. It re-observes
// each Database periodically and on request, corrects drift (a dropped
// database, a changed password, revoked privileges) and records each
// correction. On deletion with deletionPolicy Delete it terminates
// connections and drops the database and role, but only once its finalizer
// is the last one: other controllers' finalizers (backups) go first. It
// knows nothing about backups beyond loading spec.restoreFrom.
package database

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/sqlengine"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "database"

// FieldManager is the field manager of every write this controller makes.
const FieldManager = "converge-database"

// DefaultObserveInterval is how often the observer of an instance takes a
// snapshot of its server and queues the Databases that drifted.
const DefaultObserveInterval = 10 * time.Second

// DefaultResyncInterval is how often a Ready Database gets a full
// reconcile anyway: it checks what a snapshot cannot see (the password, by
// logging in, and extensions).
const DefaultResyncInterval = 10 * time.Minute

// instanceIndex indexes Databases by "<group>/<kind>/<name>" of instanceRef.
const instanceIndex = "spec.instanceRef"

// +kubebuilder:rbac:groups=sql.converge.dev,resources=databases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sql.converge.dev,resources=databases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sql.converge.dev,resources=databases/finalizers,verbs=update
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=sql.converge.dev,resources=postgresinstances;mariadbinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=backup.converge.dev,resources=databasebackups,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

var driftCorrections = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "converge_database_drift_corrections_total",
	Help: "Corrections of drift found on database servers, by kind (DatabaseRecreated, RoleRecreated, PasswordReset, PrivilegesGranted).",
}, []string{"kind"})

func init() { metrics.Registry.MustRegister(driftCorrections) }

// Server is what the controller needs from a database server, logged in as
// its admin. *sqlengine.Server implements it.
type Server interface {
	Alive(ctx context.Context) error
	Database(ctx context.Context, name string) (sqlengine.DatabaseInfo, error)
	HasTables(ctx context.Context, c sqlengine.Config) (bool, error)
	RoleExists(ctx context.Context, name string) (bool, error)
	CreateRole(ctx context.Context, name, password string, claim sqlengine.Claim) error
	DatabaseOwnership(ctx context.Context, name string) (sqlengine.Ownership, error)
	RoleOwnership(ctx context.Context, name string) (sqlengine.Ownership, error)
	MarkDatabase(ctx context.Context, name string, claim sqlengine.Claim) error
	MarkRole(ctx context.Context, name string, claim sqlengine.Claim) error
	PrivilegedRole(ctx context.Context, name, adminUser string) (string, error)
	SetPassword(ctx context.Context, name, password string) error
	CreateDatabase(ctx context.Context, sp sqlengine.Spec) error
	MissingPrivileges(ctx context.Context, sp sqlengine.Spec) ([]string, error)
	Grant(ctx context.Context, sp sqlengine.Spec) error
	EnsureExtensions(ctx context.Context, sp sqlengine.Spec) error
	DropDatabase(ctx context.Context, name string) error
	DropRole(ctx context.Context, name string, claim sqlengine.Claim) error
	// Snapshot reads every database and role of the server at once (the
	// observers' one query per interval).
	Snapshot(ctx context.Context) (*sqlengine.Snapshot, error)
}

// Engines connects to servers.
type Engines interface {
	// Admin returns a Server for admin credentials (pooled).
	Admin(c sqlengine.Config) (Server, error)
	// CheckLogin logs in with c on a fresh connection and runs SELECT 1.
	CheckLogin(ctx context.Context, c sqlengine.Config) error
	// Restore loads a dump file into c.Database as c.User.
	Restore(ctx context.Context, c sqlengine.Config, serverVersion, path, sha256 string) error
	// IsAuthError tells refused credentials from other failures.
	IsAuthError(err error) bool
}

// SQLEngines is the real Engines, on sqlengine.
type SQLEngines struct {
	Pools sqlengine.Pools
	Tools sqlengine.Tools
}

// Admin implements Engines.
func (e *SQLEngines) Admin(c sqlengine.Config) (Server, error) { return e.Pools.Admin(c) }

// CheckLogin implements Engines.
func (e *SQLEngines) CheckLogin(ctx context.Context, c sqlengine.Config) error {
	return sqlengine.CheckLogin(ctx, c)
}

// Restore implements Engines.
func (e *SQLEngines) Restore(ctx context.Context, c sqlengine.Config, v, path, sum string) error {
	return sqlengine.Restore(ctx, e.Tools, c, v, path, sum)
}

// IsAuthError implements Engines.
func (e *SQLEngines) IsAuthError(err error) bool { return sqlengine.IsAuthError(err) }

// Reconciler reconciles Databases.
type Reconciler struct {
	client.Client
	// Egress refuses instance hosts whose address the cluster admin
	// denies (internal/egress); nil refuses nothing.
	Egress *egress.Policy
	// Recorder emits Events; set by SetupWithManager.
	Recorder events.EventRecorder
	// Engines connects to servers; SQLEngines when nil.
	Engines Engines
	// ObserveInterval is how often each instance's server is observed, for
	// all its Databases at once; DefaultObserveInterval when zero.
	ObserveInterval time.Duration
	// ResyncInterval is how often a Ready Database is fully reconciled
	// (±5 %); DefaultResyncInterval when zero.
	ResyncInterval time.Duration
	// BackupDir is the backup store restoreFrom dumps are read from.
	BackupDir string
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int

	// Contracts decides, from the cache, whether a kind declares the
	// database-instance contract; set by SetupWithManager.
	Contracts pcontract.Checker

	apiReader client.Reader
	mgr       ctrl.Manager
	// instances watches each instance kind (the built-in ones from the
	// start, others once a Database refers to them).
	instances *creconcile.KindWatcher
	observers *observerHub
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	r.mgr = mgr
	r.apiReader = mgr.GetAPIReader()
	r.Contracts = pcontract.Checker{Reader: mgr.GetCache(), Mapper: mgr.GetRESTMapper()}
	if r.Engines == nil {
		r.Engines = &SQLEngines{}
	}
	if r.ObserveInterval == 0 {
		r.ObserveInterval = DefaultObserveInterval
	}
	if r.ResyncInterval == 0 {
		r.ResyncInterval = DefaultResyncInterval
	}
	r.observers = newObserverHub(r, r.ObserveInterval)
	if err := mgr.Add(r.observers); err != nil {
		return fmt.Errorf("adding the drift observers: %w", err)
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &sqlv1alpha1.Database{}, instanceIndex, //nolint:forbidigo // index registration has no request context
		func(o client.Object) []string {
			return []string{instanceKey(o.(*sqlv1alpha1.Database).Spec.InstanceRef)}
		}); err != nil {
		return fmt.Errorf("indexing %s: %w", instanceIndex, err)
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&sqlv1alpha1.Database{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: relevantUpdate})).
		// The connection Secret's creation is this controller's own write
		// (queueing the Database again would cost one more observation
		// per new Database); its update or deletion by anyone is repaired.
		Owns(&corev1.Secret{}, builder.WithPredicates(predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }})).
		WatchesRawSource(source.Channel(r.observers.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles, RateLimiter: failureRateLimiter(r.ObserveInterval)}).
		Build(r)
	if err != nil {
		return err
	}
	r.instances = creconcile.NewKindWatcher(c, mgr.GetCache(), r.databasesForInstance)
	for _, gvk := range []schema.GroupVersionKind{
		sqlv1alpha1.GroupVersion.WithKind("PostgresInstance"), sqlv1alpha1.GroupVersion.WithKind("MariaDBInstance"),
	} {
		if err := r.instances.Watch(gvk); err != nil {
			return err
		}
	}
	return nil
}

// failureRateLimiter is controller-runtime's default (per-item exponential
// from 5 ms, and 10 per second overall) with the per-item delay capped at
// the observe interval instead of 1000 s: a Database whose server failed for
// a few seconds (a busy instance, connections dropped by a DROP ... FORCE)
// is tried again within one interval of the server recovering, not minutes
// later. A server that keeps failing is asked once per interval, as drift
// observation asks it anyway.
func failureRateLimiter(interval time.Duration) workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, interval),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// relevantUpdate skips updates that only touch status (ours or the backup
// controller's), so writing status does not trigger another observation;
// spec, annotations (reconcile-requested-at), labels, finalizers and the
// deletion timestamp do.
func relevantUpdate(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() ||
		!mapsEqual(o.GetAnnotations(), n.GetAnnotations()) ||
		!mapsEqual(o.GetLabels(), n.GetLabels()) ||
		!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
		!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp())
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func instanceKey(ref sqlv1alpha1.InstanceReference) string {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	return gv.Group + "/" + ref.Kind + "/" + ref.Name
}

func (r *Reconciler) databasesForInstance(ctx context.Context, o client.Object) []reconcile.Request {
	gvk := o.GetObjectKind().GroupVersionKind()
	list := &sqlv1alpha1.DatabaseList{}
	if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{instanceIndex: gvk.Group + "/" + gvk.Kind + "/" + o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// Reconcile provisions, observes or deletes one Database.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	d := &sqlv1alpha1.Database{}
	if err := r.Get(ctx, req.NamespacedName, d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Database", klog.KObj(d)))
	if d.DeletionTimestamp.IsZero() {
		// The finalizer goes on before anything exists on the server. Once the
		// API server has it, this pass goes on instead of waiting for the
		// watch to bring the object back: under load the watch was the larger
		// part of a new Database's wait.
		if _, err := creconcile.EnsureFinalizer(ctx, r.Client, d, sqlv1alpha1.DatabaseFinalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	s := newScope(d, time.Now())
	// One status write at the end, none when nothing changed. It is locked
	// on the resourceVersion: on a conflict only this run's changes are
	// re-applied to the fresh object, so conditions other controllers set
	// (the backup controller's) are never overwritten from a stale copy.
	// The fresh object is read past the cache, so a drift correction found
	// by this run is re-applied to the object as stored, not lost to a cache
	// that has not yet seen the previous run's write.
	patcher := creconcile.NewStatusPatcher(r.Client, d).ReadConflictsFrom(r.apiReader)
	defer func() {
		computeStatus(s)
		// A terminal error (Stalled) has observed this generation too:
		// kstatus reads a lagging observedGeneration as InProgress, which
		// would hide the Stalled condition from a waiting Sync, Flux or kpt.
		if (retErr == nil || errors.Is(retErr, reconcile.TerminalError(nil))) && !s.deleting {
			d.Status.ObservedGeneration = d.Generation
		}
		if err := patcher.Patch(ctx, d); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	if !d.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}
