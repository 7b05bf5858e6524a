package sync

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	webhookgitops "github.com/converge-dev/converge/internal/webhook/gitops"
)

// prune runs after a fully successful apply. It deletes inventory objects
// that are no longer desired, unless prune is off (they are orphaned), the
// revision would prune more than pruneLimit without approval (nothing is
// deleted; status.pendingPrune lists them), or an object opted out or was not
// created by this Sync. The new inventory is the desired objects plus
// anything whose deletion failed or is held.
func (r *Reconciler) prune(ctx context.Context, s *scope, c client.Client, desired []gitopsv1alpha1.ObjectRef) error {
	sy := s.sync
	want := map[objKey]bool{}
	for _, ref := range desired {
		want[keyOf(ref)] = true
	}
	var stale []gitopsv1alpha1.ObjectRef
	for _, ref := range sy.Status.Inventory {
		if !want[keyOf(ref)] {
			stale = append(stale, ref)
		}
	}
	sy.Status.PendingPrune = nil
	if len(stale) == 0 || !ptr.Deref(sy.Spec.Prune, false) {
		for _, ref := range stale {
			s.st.drop(keyOf(ref))
		}
		sy.Status.Inventory = union(nil, desired)
		return nil
	}
	// Entries that never got created (an apply failed after the inventory
	// was written ahead) or are already gone are dropped and do not count
	// against the limit.
	stale, err := r.existing(ctx, c, stale)
	if err != nil {
		return err
	}
	total := len(sy.Status.Inventory)
	limit, err := webhookgitops.ResolvePruneLimit(sy.Spec.PruneLimit, total)
	if err != nil {
		return err
	}
	if len(stale) > limit && !approved(sy, s.revision) {
		sortRefs(stale)
		held := &gitopsv1alpha1.PendingPrune{Revision: s.revision, Count: int32(len(stale)), Limit: int32(limit)} //nolint:gosec // bounded by the inventory's MaxItems
		held.Objects = stale[:min(len(stale), 100)]
		sy.Status.PendingPrune = held
		s.pruneHeld = held
		sy.Status.Inventory = union(stale, desired)
		return nil
	}
	var errs []error
	var kept []gitopsv1alpha1.ObjectRef
	for _, ref := range stale {
		deleted, err := r.pruneOne(ctx, c, sy, ref)
		if err != nil {
			errs = append(errs, err)
			kept = append(kept, ref) // still exists and is ours: retry later
			continue
		}
		s.st.drop(keyOf(ref))
		if deleted {
			s.changes.add(resultDeleted, ref)
		} else {
			s.changes.add(resultSkipped, ref)
		}
	}
	sy.Status.Inventory = union(kept, desired)
	return errors.Join(errs...)
}

// pruneOne deletes one object if it is still this Sync's: labelled for it
// AND applied by the Sync field manager (labels can be copied; managedFields
// cannot), and not opted out with converge.dev/prune: disabled. It reports
// whether it deleted; a vanished or foreign object is dropped silently.
func (r *Reconciler) pruneOne(ctx context.Context, c client.Client, sy *gitopsv1alpha1.Sync, ref gitopsv1alpha1.ObjectRef) (bool, error) {
	if r.misplaced(ref) {
		return false, nil
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvkOf(ref))
	key := client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
	if err := c.Get(ctx, key, m); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return false, nil
		}
		return false, readError("reading "+refString(ref)+" before pruning", err)
	}
	if !m.DeletionTimestamp.IsZero() {
		return false, nil
	}
	if m.Annotations[gitopsv1alpha1.PruneAnnotation] == gitopsv1alpha1.PruneDisabled {
		return false, nil
	}
	l := m.Labels
	if l[gitopsv1alpha1.SyncNameLabel] != sy.Name || l[gitopsv1alpha1.SyncNamespaceLabel] != sy.Namespace || !appliedByUs(m.ManagedFields) {
		return false, nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvkOf(ref))
	u.SetNamespace(ref.Namespace)
	u.SetName(ref.Name)
	uid := m.UID
	err := c.Delete(ctx, u, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("pruning %s: %w", refString(ref), err)
	}
	return err == nil, nil
}

// existing keeps the refs whose object exists.
func (r *Reconciler) existing(ctx context.Context, c client.Client, refs []gitopsv1alpha1.ObjectRef) ([]gitopsv1alpha1.ObjectRef, error) {
	var out []gitopsv1alpha1.ObjectRef
	for _, ref := range refs {
		if r.misplaced(ref) {
			continue
		}
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvkOf(ref))
		err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, m)
		switch {
		case err == nil:
			out = append(out, ref)
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		default:
			return nil, readError("reading "+refString(ref)+" before pruning", err)
		}
	}
	return out, nil
}

// misplaced reports an inventory entry of a namespaced kind without a
// namespace: no such object can exist. Releases before placement.NamespaceIn
// recorded objects of a kind whose CRD came in the same revision that way;
// reading one would be a cluster-scoped read the tenant may not make, and
// would hold the prune (ReadForbidden) for good.
func (r *Reconciler) misplaced(ref gitopsv1alpha1.ObjectRef) bool {
	if ref.Namespace != "" {
		return false
	}
	gvk := gvkOf(ref)
	m, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil && m.Scope.Name() == meta.RESTScopeNameNamespace
}

func appliedByUs(mfs []metav1.ManagedFieldsEntry) bool {
	for _, mf := range mfs {
		if mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}
