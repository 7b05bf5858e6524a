// Package sync implements the Sync controller: it renders a path of a
// GitRepository's artifact, applies it with server-side apply under one field
// manager (CRDs and Namespaces first), skips objects that already match,
// records every applied object in status.inventory, prunes what left git
// (never after a failed fetch, render or apply, never an empty render, never
// more than pruneLimit without approval), and corrects or reports drift as
// soon as a watch sees it.
package sync

import (
	"context"
	"errors"
	"slices"
	gosync "sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/artifact"
	"github.com/converge-dev/converge/internal/gitops/render"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "sync"

// FieldManager is the field manager of every object a Sync applies and of
// the Sync's status. Never rename it: fields it owns would be orphaned.
const FieldManager = "converge-sync"

const (
	sourceIndex    = "spec.sourceRef"
	dependsOnIndex = "spec.dependsOn.sync"
)

// The manager's ClusterRole (generated from these markers) grants only what
// the controller needs for its own kinds, plus `impersonate` on
// serviceaccounts: every read and write a Sync does on a tenant's behalf
// impersonates a ServiceAccount of the Sync's namespace, so what a Sync may
// touch is exactly what the cluster admin granted that ServiceAccount
// (docs/gitops.md, "Permissions"). Never groups, users or wildcards: the API
// server adds a service account's groups itself.
//
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=impersonate
// +kubebuilder:rbac:groups=gitops.converge.dev,resources=syncs,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=gitops.converge.dev,resources=syncs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gitops.converge.dev,resources=syncs/finalizers,verbs=update
// +kubebuilder:rbac:groups=gitops.converge.dev,resources=gitrepositories,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler reconciles Syncs.
type Reconciler struct {
	client.Client
	// APIReader reads Syncs uncached.
	APIReader client.Reader
	// Config is the manager's REST config; impersonating clients derive
	// from it.
	Config *rest.Config
	// Mapper maps kinds to resources and scopes.
	Mapper meta.RESTMapper
	// Recorder emits Events; set by SetupWithManager.
	Recorder events.EventRecorder
	// Store holds the artifacts the GitRepository controller fetched.
	Store artifact.Store
	// AllowCrossNamespaceRefs lets a Sync use a GitRepository of another
	// namespace.
	AllowCrossNamespaceRefs bool
	// DefaultServiceAccount is impersonated when a Sync names none.
	DefaultServiceAccount string
	// Lockdown: a Sync never acts as the manager. With no service account
	// to impersonate it is Stalled (ServiceAccountRequired).
	Lockdown bool
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int
	// Render bounds each render (objects, file size, time); zero fields
	// take render's defaults.
	Render render.Options

	// RenderCacheObjects bounds the rendered objects kept in memory across
	// all Syncs; DefaultRenderCacheObjects when zero.
	RenderCacheObjects int

	drift   *driftWatcher
	renders *renderCache
	mu      gosync.Mutex
	states  map[types.NamespacedName]*syncState
	clients gosync.Map // impersonated user -> client.Client
}

// SetupWithManager registers the controller, its indexes and the drift
// watcher.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.Config = mgr.GetConfig()
	r.APIReader = mgr.GetAPIReader()
	r.Mapper = mgr.GetRESTMapper()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	r.states = map[types.NamespacedName]*syncState{}
	r.renders = newRenderCache(r.RenderCacheObjects)
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	ctx := context.Background() //nolint:forbidigo // index registration happens before the manager has a context
	if err := mgr.GetFieldIndexer().IndexField(ctx, &gitopsv1alpha1.Sync{}, sourceIndex, func(o client.Object) []string {
		s := o.(*gitopsv1alpha1.Sync)
		return []string{sourceKey(s).String()}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &gitopsv1alpha1.Sync{}, dependsOnIndex, func(o client.Object) []string {
		s := o.(*gitopsv1alpha1.Sync)
		var out []string
		for _, d := range s.Spec.DependsOn {
			if isSyncDependency(d) {
				out = append(out, dependencyKey(s, d).String())
			}
		}
		return out
	}); err != nil {
		return err
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&gitopsv1alpha1.Sync{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&gitopsv1alpha1.GitRepository{}, handler.EnqueueRequestsFromMapFunc(r.syncsForSource)).
		Watches(&gitopsv1alpha1.Sync{}, handler.EnqueueRequestsFromMapFunc(r.dependents)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Build(r)
	if err != nil {
		return err
	}
	r.drift, err = newDriftWatcher(mgr, c)
	if err != nil {
		return err
	}
	r.drift.r = r
	return r.warmDriftWatches(mgr)
}

func (r *Reconciler) syncsForSource(ctx context.Context, o client.Object) []reconcile.Request {
	list := &gitopsv1alpha1.SyncList{}
	if err := r.List(ctx, list, client.MatchingFields{sourceIndex: client.ObjectKeyFromObject(o).String()}); err != nil {
		return nil
	}
	return requests(list)
}

func (r *Reconciler) dependents(ctx context.Context, o client.Object) []reconcile.Request {
	list := &gitopsv1alpha1.SyncList{}
	if err := r.List(ctx, list, client.MatchingFields{dependsOnIndex: client.ObjectKeyFromObject(o).String()}); err != nil {
		return nil
	}
	return requests(list)
}

func requests(list *gitopsv1alpha1.SyncList) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// Reconcile applies one Sync.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	sy := &gitopsv1alpha1.Sync{}
	// The cache holds only this manager's shard: a drift event can name a
	// Sync of another shard, which is not ours to reconcile.
	if err := r.Get(ctx, req.NamespacedName, sy); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Then read past the cache: the status (inventory, last revision, drift
	// count) written by the previous run must be seen by this one.
	if err := r.APIReader.Get(ctx, req.NamespacedName, sy); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Sync", klog.KObj(sy)))
	if sy.DeletionTimestamp.IsZero() {
		// Locked on the resourceVersion: a finalizer list patched from a
		// stale read must not drop another controller's finalizer. Carry on
		// after: a finalizer change triggers no event of its own.
		if _, err := creconcile.EnsureFinalizer(ctx, r.Client, sy, gitopsv1alpha1.SyncFinalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	s := &scope{sync: sy, status: creconcile.NewStatusPatcher(r.Client, sy), now: time.Now(), st: r.state(req.NamespacedName)}
	defer func() {
		computeStatus(s)
		if retErr == nil || errors.Is(retErr, reconcile.TerminalError(nil)) {
			sy.Status.ObservedGeneration = sy.Generation
		}
		// An unchanged status is not sent: a Sync at rest costs the API
		// server nothing.
		if err := s.status.Patch(ctx, sy); err != nil {
			retErr = errors.Join(retErr, err)
		}
		r.emitEvents(s)
		inventoryObjects.WithLabelValues(sy.Namespace, sy.Name).Set(float64(len(sy.Status.Inventory)))
	}()
	if !sy.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func (r *Reconciler) state(key types.NamespacedName) *syncState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.states[key]
	if !ok {
		st = newSyncState()
		r.states[key] = st
	}
	return st
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.states, key)
	r.renders.drop(key)
	inventoryObjects.DeleteLabelValues(key.Namespace, key.Name)
}

// emitEvents sends the Event summary of this run.
func (r *Reconciler) emitEvents(s *scope) {
	sy := s.sync
	if s.changes.changed() {
		r.Recorder.Eventf(sy, nil, corev1.EventTypeNormal, "ApplySucceeded", "Apply",
			"Revision %s: %s%s", s.revision, s.changes.summary(), s.changes.details(10))
	}
	for _, d := range s.drifts {
		r.Recorder.Eventf(sy, nil, corev1.EventTypeWarning, "DriftDetected", "Drift",
			"%s %s by %v (fields %v): %s", refString(d.Object), d.Action, d.FieldManagers, d.Fields, driftVerb(d.Action))
	}
	if s.failure != nil && !slices.Contains([]string{gitopsv1alpha1.DependencyNotReadyReason, gitopsv1alpha1.SourceNotReadyReason}, s.failure.reason) {
		r.Recorder.Eventf(sy, nil, corev1.EventTypeWarning, s.failure.reason, "Reconcile", "%s", s.failure.message)
	}
	if s.pruneHeld != nil {
		r.Recorder.Eventf(sy, nil, corev1.EventTypeWarning, gitopsv1alpha1.PruneLimitExceededReason, "Prune",
			"Revision %s would prune %d objects (limit %d); approve with: converge sync approve-prune %s -n %s",
			s.pruneHeld.Revision, s.pruneHeld.Count, s.pruneHeld.Limit, sy.Name, sy.Namespace)
	}
}

func driftVerb(action string) string {
	if action == driftCorrected {
		return "restored the desired state"
	}
	return "left as is (driftPolicy: Report)"
}
