package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/expr"
	"github.com/converge-dev/converge/internal/gitops/placement"
	"github.com/converge-dev/converge/internal/gitops/render"
	gitopsspec "github.com/converge-dev/converge/internal/gitops/spec"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// dependencyRequeue is how often a Sync waiting on a non-Sync dependency
// checks again (Sync dependencies are watched).
const dependencyRequeue = 5 * time.Second

// scope holds what one reconciliation observed and decided.
type scope struct {
	sync *gitopsv1alpha1.Sync
	// status writes the status: once at the end of the reconcile, and
	// before the apply when writeAheadInventory records new objects. Each
	// write is the base of the next, so the final patch does not carry a
	// large inventory twice.
	status *creconcile.StatusPatcher
	now    time.Time
	st     *syncState

	revision  string
	suspended bool
	applied   bool // the revision was applied (and pruned) without error
	healthy   *bool
	healthMsg string
	waiting   bool
	deleting  bool

	changes   changeSet
	drifts    []gitopsv1alpha1.DriftedObject
	pruneHeld *gitopsv1alpha1.PendingPrune
	failure   *failure
}

type failure struct {
	reason, message string
	stalled         bool
}

func (s *scope) fail(reason string, stalled bool, format string, args ...any) {
	s.failure = &failure{reason: reason, message: fmt.Sprintf(format, args...), stalled: stalled}
}

func (s *scope) retryAfter() time.Duration {
	sp := s.sync.Spec
	if sp.RetryInterval != nil && sp.RetryInterval.Duration > 0 {
		return sp.RetryInterval.Duration
	}
	return s.interval()
}

func (s *scope) interval() time.Duration {
	if i := s.sync.Spec.Interval; i != nil && i.Duration > 0 {
		return i.Duration
	}
	return gitopsspec.DefaultSyncInterval
}

func (s *scope) timeout() time.Duration {
	if t := s.sync.Spec.Timeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return gitopsspec.DefaultSyncTimeout
}

func sourceKey(s *gitopsv1alpha1.Sync) types.NamespacedName {
	ns := s.Spec.SourceRef.Namespace
	if ns == "" {
		ns = s.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: s.Spec.SourceRef.Name}
}

func isSyncDependency(d gitopsv1alpha1.Dependency) bool {
	return (d.APIVersion == "" && d.Kind == "") ||
		(d.APIVersion == gitopsv1alpha1.GroupVersion.String() && d.Kind == "Sync")
}

func dependencyKey(s *gitopsv1alpha1.Sync, d gitopsv1alpha1.Dependency) types.NamespacedName {
	ns := d.Namespace
	if ns == "" {
		ns = s.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: d.Name}
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	sy := s.sync
	gitopsspec.DefaultSync(sy) // in memory only: objects stored before the webhook behave the same
	if errs := gitopsspec.ValidateSyncSpec(sy, field.NewPath("spec")); len(errs) > 0 {
		s.fail(gitopsv1alpha1.InvalidSpecReason, true, "%s", errs.ToAggregate().Error())
		return ctrl.Result{}, reconcile.TerminalError(errs.ToAggregate())
	}
	if v, ok := creconcile.RequestedAt(sy); ok {
		sy.Status.LastHandledReconcileAt = v
	}
	if sy.Spec.Suspend {
		s.suspended = true
		return ctrl.Result{}, nil
	}
	c, err := r.clientFor(sy)
	if errors.Is(err, errNoIdentity) {
		s.fail(gitopsv1alpha1.ServiceAccountRequiredReason, true, "spec.serviceAccountName: %s",
			gitopsspec.ServiceAccountRequiredMessage(sy.Namespace))
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	user, _ := r.identity(sy)
	s.st.actAs(user)

	// Source.
	dir, revision, res, err := r.source(ctx, s)
	if dir == "" {
		return res, err
	}
	s.revision = revision
	sy.Status.LastAttemptedRevision = revision

	// Dependencies.
	if ok, reason, msg := r.dependenciesReady(ctx, s, c); !ok {
		s.fail(reason, false, "%s", msg)
		return ctrl.Result{RequeueAfter: min(dependencyRequeue, s.retryAfter())}, nil
	}

	// Render.
	objs, err := r.render(ctx, s, dir)
	if err != nil {
		switch {
		case errors.Is(err, render.ErrPathNotFound):
			s.fail(gitopsv1alpha1.PathNotFoundReason, true, "revision %s: %v", revision, err)
		case errors.Is(err, render.ErrRefused):
			s.fail(gitopsv1alpha1.RenderRefusedReason, true, "revision %s: %v", revision, err)
		case errors.Is(err, render.ErrLimitExceeded):
			s.fail(gitopsv1alpha1.RenderLimitExceededReason, true, "revision %s: %v", revision, err)
		case ctx.Err() != nil:
			return ctrl.Result{}, err
		default:
			s.fail(gitopsv1alpha1.BuildFailedReason, true, "revision %s: %v", revision, err)
		}
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	if len(objs) == 0 {
		s.fail(gitopsv1alpha1.EmptyRenderReason, true,
			"revision %s: path %q renders no objects; nothing is applied or pruned (delete the Sync to remove everything)", revision, sy.Spec.Path)
		return ctrl.Result{}, reconcile.TerminalError(errors.New("empty render"))
	}

	// Kinds: one unknown kind is one Stalled condition, not one apply error
	// per object.
	if msg, err := r.unknownKinds(ctx, sy, dir, objs); err != nil {
		return ctrl.Result{}, err
	} else if msg != "" {
		s.fail(gitopsv1alpha1.UnknownKindReason, true, "revision %s: %s", revision, msg)
		return ctrl.Result{RequeueAfter: s.retryAfter()}, nil
	}

	// Apply (applyAll records every object in the inventory before it is
	// written, so a crash mid-apply never loses track of one).
	actx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	applyErr := r.applyAll(actx, s, c, objs)
	// After the apply: kinds whose CRD came in this revision now map, so
	// their namespace is known.
	desired := make([]gitopsv1alpha1.ObjectRef, 0, len(objs))
	for _, u := range objs {
		ref := refOf(u)
		ref.Namespace = r.namespaceOf(sy, u)
		desired = append(desired, ref)
	}
	if applyErr != nil {
		// Keep every object known before and every desired one: nothing is
		// pruned after a failed apply.
		sy.Status.Inventory = union(sy.Status.Inventory, desired)
		s.fail(gitopsv1alpha1.ApplyFailedReason, false, "revision %s: %v", revision, applyErr)
		return ctrl.Result{RequeueAfter: s.retryAfter()}, nil
	}

	// Prune.
	if err := r.prune(ctx, s, c, desired); err != nil {
		reason := gitopsv1alpha1.PruneFailedReason
		if isForbiddenRead(err) {
			reason = gitopsv1alpha1.ReadForbiddenReason
		}
		s.fail(reason, false, "revision %s: %v", revision, err)
		return ctrl.Result{RequeueAfter: s.retryAfter()}, nil
	}
	if s.changes.changed() || sy.Status.LastAppliedRevision != revision || sy.Status.LastApplySummary == "" {
		sy.Status.LastApplySummary = s.changes.summary()
	}
	if err := r.drift.ensure(sy.Status.Inventory); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Watching inventory kinds for drift")
	}

	// Health.
	if sy.Spec.Wait || len(sy.Spec.HealthChecks) > 0 {
		res, err := r.checkHealth(ctx, s, c, objs)
		if err != nil || res.RequeueAfter > 0 {
			return res, err
		}
	}
	s.applied = true
	sy.Status.LastAppliedRevision = revision
	if s.pruneHeld != nil {
		return ctrl.Result{RequeueAfter: s.interval()}, nil
	}
	return ctrl.Result{RequeueAfter: s.interval()}, nil
}

// source finds the artifact directory. An empty dir means: stop here with
// the returned result (the failure is on the scope).
func (r *Reconciler) source(ctx context.Context, s *scope) (dir, revision string, _ ctrl.Result, _ error) {
	sy := s.sync
	key := sourceKey(sy)
	if key.Namespace != sy.Namespace && !r.AllowCrossNamespaceRefs {
		s.fail(gitopsv1alpha1.AccessDeniedReason, true,
			"cross-namespace reference to GitRepository %s is not allowed (manager flag --gitops-allow-cross-namespace-refs)", key)
		return "", "", ctrl.Result{}, reconcile.TerminalError(errors.New("cross-namespace reference refused"))
	}
	repo := &gitopsv1alpha1.GitRepository{}
	if err := r.Get(ctx, key, repo); err != nil {
		if apierrors.IsNotFound(err) {
			s.fail(gitopsv1alpha1.SourceNotReadyReason, false, "GitRepository %s not found", key)
			return "", "", ctrl.Result{RequeueAfter: s.retryAfter()}, nil
		}
		return "", "", ctrl.Result{}, err
	}
	a := repo.Status.Artifact
	if a == nil {
		msg := "has no artifact yet"
		reason := gitopsv1alpha1.SourceNotReadyReason
		if c := meta.FindStatusCondition(repo.Status.Conditions, gitopsv1alpha1.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse {
			msg, reason = c.Reason+": "+c.Message, gitopsv1alpha1.ArtifactFailedReason
		}
		s.fail(reason, false, "GitRepository %s %s", key, msg)
		return "", "", ctrl.Result{}, nil // the GitRepository watch brings us back
	}
	if !r.Store.Has(key.Namespace, key.Name, a.Revision, a.Digest) {
		// After a manager restart the cache is empty until the GitRepository
		// controller fetches again.
		// A new leader is here while its GitRepository controller fetches
		// the revision again; that fetch changes no status, so poll.
		s.fail(gitopsv1alpha1.SourceNotReadyReason, false, "waiting for revision %s of GitRepository %s to be fetched", a.Revision, key)
		return "", "", ctrl.Result{RequeueAfter: 500 * time.Millisecond}, nil
	}
	return r.Store.Path(key.Namespace, key.Name, a.Revision, a.Digest), a.Revision, ctrl.Result{}, nil
}

// render renders the artifact, reusing the last result while the revision,
// path and spec are the same (drift corrections re-render nothing).
func (r *Reconciler) render(ctx context.Context, s *scope, dir string) ([]*unstructured.Unstructured, error) {
	sy := s.sync
	rk := fmt.Sprintf("%s|%s|%d", dir, sy.Spec.Path, sy.Generation)
	key := types.NamespacedName{Namespace: sy.Namespace, Name: sy.Name}
	if objs, ok := r.renders.get(key, rk); ok {
		return objs, nil
	}
	objs, err := render.Render(ctx, dir, sy.Spec.Path, r.Render)
	if err != nil {
		return nil, err
	}
	scopes := placement.CRDScopes(objs)
	for _, u := range objs {
		r.prepare(sy, scopes, u)
	}
	r.renders.put(key, rk, objs)
	return objs, nil
}

// prepare sets the ownership labels and the namespace (placement.NamespaceIn):
// a kind defined by a CRD of this same render does not map yet and takes
// the scope that CRD declares, so the inventory written ahead of the apply
// records it where it will be.
func (r *Reconciler) prepare(sy *gitopsv1alpha1.Sync, scopes placement.Scopes, u *unstructured.Unstructured) {
	l := u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[gitopsv1alpha1.SyncNameLabel] = sy.Name
	l[gitopsv1alpha1.SyncNamespaceLabel] = sy.Namespace
	u.SetLabels(l)
	if ns, err := placement.NamespaceIn(r.Mapper, scopes, sy, u); err == nil {
		u.SetNamespace(ns)
	}
}

// unknownKinds checks that every kind of objs is served by the API server
// or defined by a CRD among objs. It returns a message naming the first
// unknown kind and its file (and how many more there are), "" when all are
// known.
func (r *Reconciler) unknownKinds(ctx context.Context, sy *gitopsv1alpha1.Sync, dir string, objs []*unstructured.Unstructured) (string, error) {
	defined := map[schema.GroupKind]bool{}
	for _, u := range objs {
		if u.GroupVersionKind().GroupKind().String() == "CustomResourceDefinition.apiextensions.k8s.io" {
			g, _, _ := unstructured.NestedString(u.Object, "spec", "group")
			k, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
			defined[schema.GroupKind{Group: g, Kind: k}] = true
		}
	}
	var unknown []schema.GroupVersionKind
	seen := map[schema.GroupVersionKind]bool{}
	var first *unstructured.Unstructured
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		if seen[gvk] || defined[gvk.GroupKind()] || placement.ClusterScopedWellKnown(u) {
			continue
		}
		seen[gvk] = true
		_, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			continue
		}
		if !meta.IsNoMatchError(err) {
			return "", fmt.Errorf("mapping %s: %w", gvk, err)
		}
		if first == nil {
			first = u
		}
		unknown = append(unknown, gvk)
	}
	if first == nil {
		return "", nil
	}
	gvk, name := first.GroupVersionKind(), first.GetName()
	file, err := render.Locate(ctx, dir, sy.Spec.Path, r.Render, func(o *unstructured.Unstructured) bool {
		return o.GroupVersionKind() == gvk && o.GetName() == name
	})
	if err != nil || file == "" {
		file = "path " + sy.Spec.Path
	}
	msg := fmt.Sprintf("kind %s (apiVersion %s) of %s/%s in %s is not served by the API server, and no CustomResourceDefinition of this revision defines it",
		gvk.Kind, gvk.GroupVersion(), gvk.Kind, name, file)
	if len(unknown) > 1 {
		msg += fmt.Sprintf(" (and %d more unknown kinds)", len(unknown)-1)
	}
	return msg + "; nothing is applied or pruned", nil
}

// writeAheadInventory records desired objects missing from the inventory
// before they are applied.
func (r *Reconciler) writeAheadInventory(ctx context.Context, s *scope, objs []*unstructured.Unstructured) error {
	sy := s.sync
	have := map[objKey]bool{}
	for _, ref := range sy.Status.Inventory {
		have[keyOf(ref)] = true
	}
	var missing []gitopsv1alpha1.ObjectRef
	for _, u := range objs {
		ref := refOf(u)
		ref.Namespace = r.namespaceOf(sy, u)
		if !have[keyOf(ref)] {
			missing = append(missing, ref)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sy.Status.Inventory = union(sy.Status.Inventory, missing)
	// Say what is going on while a large revision is applied.
	creconcile.MarkTrue(&sy.Status.Conditions, sy.Generation, gitopsv1alpha1.ReconcilingCondition, gitopsv1alpha1.ProgressingReason,
		fmt.Sprintf("applying revision %s (%d new objects)", s.revision, len(missing)))
	// This patch carries every status change made so far, and the final
	// one only what changes after it.
	if err := s.status.Patch(ctx, sy); err != nil {
		return fmt.Errorf("recording the inventory before applying: %w", err)
	}
	return nil
}

func union(a, b []gitopsv1alpha1.ObjectRef) []gitopsv1alpha1.ObjectRef {
	seen := map[objKey]bool{}
	var out []gitopsv1alpha1.ObjectRef
	for _, l := range [][]gitopsv1alpha1.ObjectRef{b, a} { // b's versions win
		for _, ref := range l {
			if !seen[keyOf(ref)] {
				seen[keyOf(ref)] = true
				out = append(out, ref)
			}
		}
	}
	sortRefs(out)
	return out
}

// dependenciesReady evaluates spec.dependsOn with the Sync's own client:
// a dependency its identity may not read is reported as such
// (ReadForbidden), and its ready expression is never evaluated, so the
// status says nothing about an object the tenant could not read itself.
func (r *Reconciler) dependenciesReady(ctx context.Context, s *scope, c client.Client) (ok bool, reason, msg string) {
	sy := s.sync
	notReady := gitopsv1alpha1.DependencyNotReadyReason
	for _, d := range sy.Spec.DependsOn {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(d.APIVersion)
		u.SetKind(d.Kind)
		key := dependencyKey(sy, d)
		if m, err := r.Mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version); err == nil && m.Scope.Name() == meta.RESTScopeNameRoot {
			key.Namespace = ""
		}
		name := fmt.Sprintf("%s %s", d.Kind, key)
		if err := c.Get(ctx, key, u); err != nil {
			err = readError("dependency "+name, err)
			if isForbiddenRead(err) {
				return false, gitopsv1alpha1.ReadForbiddenReason, err.Error()
			}
			return false, notReady, err.Error()
		}
		if d.Ready != "" {
			p, err := expr.Compile(d.Ready)
			if err != nil {
				return false, notReady, fmt.Sprintf("dependency %s: %v", name, err)
			}
			ok, err := p.Eval(u.Object)
			if err != nil {
				return false, notReady, fmt.Sprintf("dependency %s: %v", name, err)
			}
			if !ok {
				return false, notReady, fmt.Sprintf("dependency %s is not ready: %s is false", name, d.Ready)
			}
			continue
		}
		if !readyCondition(u) {
			return false, notReady, fmt.Sprintf("dependency %s is not ready (its Ready condition is not True for the current generation)", name)
		}
	}
	return true, "", ""
}

// readyCondition: Ready=True and, when reported, observedGeneration current.
func readyCondition(u *unstructured.Unstructured) bool {
	if og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); found && og != u.GetGeneration() {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Ready" {
			return m["status"] == "True"
		}
	}
	return false
}

// approved reports whether the held prune of revision is approved.
func approved(sy *gitopsv1alpha1.Sync, revision string) bool {
	v := sy.Annotations[gitopsv1alpha1.ApprovePruneAnnotation]
	return v != "" && v == revision
}
