// Package gitrepository implements the GitRepository controller: it resolves
// the spec's ref with a cheap remote listing and, only when the commit (or
// the ignore rules) changed, clones that commit shallowly into the in-process
// artifact store, where the Sync controller renders it. status.artifact
// records the revision, commit message, author and time.
package gitrepository

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/git"
	"github.com/converge-dev/converge/internal/gitops/artifact"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "gitrepository"

// FieldManager is the field manager of every write this controller makes.
const FieldManager = "converge-gitrepository"

// +kubebuilder:rbac:groups=gitops.converge.dev,resources=gitrepositories,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=gitops.converge.dev,resources=gitrepositories/status,verbs=get;update;patch
// Secrets named by spec.secretRef are read with a grant the cluster admin
// gives per namespace (a RoleBinding): the chart grants no Secret access
// cluster-wide (docs/gitops.md, "Permissions").
//
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Git is what the controller needs from a git client; internal/git
// implements it.
type Git interface {
	// Resolve turns a ref into a commit without fetching objects.
	Resolve(ctx context.Context, url string, ref git.Ref, creds git.Credentials) (git.Resolved, error)
	// Checkout clones the resolved commit into dir, without .git.
	Checkout(ctx context.Context, url string, r git.Resolved, creds git.Credentials, dir string) (git.Commit, error)
}

// Reconciler reconciles GitRepositories.
type Reconciler struct {
	client.Client
	// APIReader reads Secrets without caching every Secret of the cluster.
	APIReader client.Reader
	// Recorder emits Events; set by SetupWithManager.
	Recorder events.EventRecorder
	// Git fetches; defaults to internal/git.
	Git Git
	// Store keeps the fetched artifacts.
	Store artifact.Store
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	if r.Git == nil {
		r.Git = git.Client{}
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&gitopsv1alpha1.GitRepository{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// Reconcile fetches the GitRepository's ref when it moved.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	repo := &gitopsv1alpha1.GitRepository{}
	if err := r.Get(ctx, req.NamespacedName, repo); err != nil {
		if apierrors.IsNotFound(err) {
			// The artifacts are a local cache: no finalizer needed.
			return ctrl.Result{}, r.Store.Remove(req.Namespace, req.Name)
		}
		return ctrl.Result{}, err
	}
	if !repo.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("GitRepository", klog.KObj(repo)))
	s := &scope{repo: repo, now: time.Now()}
	patcher := creconcile.NewStatusPatcher(r.Client, repo)
	defer func() {
		computeStatus(s)
		if retErr == nil || errors.Is(retErr, reconcile.TerminalError(nil)) {
			repo.Status.ObservedGeneration = repo.Generation
		}
		// An unchanged status is not sent.
		if err := patcher.Patch(ctx, repo); err != nil {
			retErr = errors.Join(retErr, err)
		}
		if s.fetched != nil {
			r.Recorder.Eventf(repo, nil, corev1.EventTypeNormal, "NewArtifact", "Fetch",
				"Stored revision %s: %s", s.fetched.Revision, firstLine(s.fetched.Message))
		}
		if s.failure != nil && s.failure.reason != "" {
			r.Recorder.Eventf(repo, nil, corev1.EventTypeWarning, s.failure.reason, "Fetch", "%s", s.failure.message)
		}
	}()
	return r.reconcileFetch(ctx, s)
}
