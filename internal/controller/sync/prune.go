package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	gitopsspec "github.com/converge-dev/converge/internal/gitops/spec"
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
	total := len(sy.Status.Inventory)
	// A Sync that never completed a revision never pruned, so an earlier
	// release cannot have leaked anything of it: a new Sync skips the scan
	// (and its list of every object it just applied).
	if ptr.Deref(sy.Spec.Prune, false) && s.st.scanLeaks() && sy.Status.LastAppliedRevision != "" {
		leaked, err := r.leaked(ctx, s, c, desired)
		if err != nil {
			s.st.rescanLeaks()
			return err
		}
		// They count as inventory entries: held, approved and limited as
		// any other.
		stale = append(stale, leaked...)
		total += len(leaked)
	}
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
	limit, err := gitopsspec.ResolvePruneLimit(sy.Spec.PruneLimit, total)
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
// whether it deleted; a vanished, opted-out or foreign object is dropped
// silently. A read that cannot tell whether the Sync applied the object
// (no managedFields) is an error: the caller keeps the object in the
// inventory.
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
	if l[gitopsv1alpha1.SyncNameLabel] != sy.Name || l[gitopsv1alpha1.SyncNamespaceLabel] != sy.Namespace {
		return false, nil // relabelled: handed to another Sync, or out of GitOps
	}
	if len(m.ManagedFields) == 0 {
		// Every object written since server-side apply has managedFields; a
		// read without them (a cache that strips them) cannot tell whose the
		// object is. Hold it: dropping it would orphan it for good.
		return false, fmt.Errorf("%w: %s", errCannotTell, refString(ref))
	}
	if !appliedByUs(m.ManagedFields) {
		return false, nil // recreated by someone else with the labels copied
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

// leaked finds the objects an earlier release dropped from inventories
// while they still existed (as the manager, its prune read managedFields
// from a cache that strips them, took every object for foreign and dropped
// it): labelled for this Sync, applied by the Sync field manager, not
// opted out, neither desired nor in the inventory. It looks only in the
// kinds the Sync applies or holds, in the namespaces its objects are in
// (and its own), by label, metadata only, as the Sync's identity: a list
// the identity may not make finds nothing. It runs once per Sync per
// manager start (syncState.scanLeaks); an object it finds is then an
// inventory entry like any other.
func (r *Reconciler) leaked(ctx context.Context, s *scope, c client.Client, desired []gitopsv1alpha1.ObjectRef) ([]gitopsv1alpha1.ObjectRef, error) {
	sy := s.sync
	known := map[objKey]bool{}
	kinds := map[schema.GroupVersionKind]bool{}
	namespaces := map[string]bool{sy.Namespace: true}
	for _, refs := range [][]gitopsv1alpha1.ObjectRef{desired, sy.Status.Inventory} {
		for _, ref := range refs {
			known[keyOf(ref)] = true
			kinds[gvkOf(ref)] = true
			if ref.Namespace != "" {
				namespaces[ref.Namespace] = true
			}
		}
	}
	sel := client.MatchingLabels{gitopsv1alpha1.SyncNameLabel: sy.Name, gitopsv1alpha1.SyncNamespaceLabel: sy.Namespace}
	var out []gitopsv1alpha1.ObjectRef
	seenGK := map[schema.GroupKind]bool{}
	for gvk := range kinds {
		if seenGK[gvk.GroupKind()] {
			continue // one version of a kind lists all its objects
		}
		seenGK[gvk.GroupKind()] = true
		m, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			continue // the kind is gone: so are its objects
		}
		scopes := []string{""}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			scopes = scopes[:0]
			for ns := range namespaces {
				scopes = append(scopes, ns)
			}
		}
		for _, ns := range scopes {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			opts := []client.ListOption{sel, client.Limit(500)}
			if ns != "" {
				opts = append(opts, client.InNamespace(ns))
			}
			for {
				err := c.List(ctx, list, opts...)
				if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
					break // the identity cannot list there, so cannot have pruned there either
				}
				if err != nil {
					return nil, fmt.Errorf("looking for %s objects of this Sync left out of its inventory: %w", gvk.Kind, err)
				}
				for i := range list.Items {
					o := &list.Items[i]
					ref := gitopsv1alpha1.ObjectRef{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: o.Namespace, Name: o.Name}
					if known[keyOf(ref)] || !o.DeletionTimestamp.IsZero() ||
						o.Annotations[gitopsv1alpha1.PruneAnnotation] == gitopsv1alpha1.PruneDisabled || !appliedByUs(o.ManagedFields) {
						continue
					}
					known[keyOf(ref)] = true
					out = append(out, ref)
				}
				if list.Continue == "" {
					break
				}
				opts = append(opts, client.Continue(list.Continue))
			}
		}
	}
	if len(out) > 0 {
		sortRefs(out)
		r.Recorder.Eventf(sy, nil, corev1.EventTypeNormal, "LeakedObjectsFound", "Prune",
			"%d objects labelled for this Sync and applied by it were missing from its inventory (dropped by an earlier release); they are pruned under the usual rules: %s",
			len(out), strings.Join(refStrings(out, 5), ", "))
	}
	return out, nil
}

func refStrings(refs []gitopsv1alpha1.ObjectRef, n int) []string {
	out := make([]string, 0, min(len(refs), n)+1)
	for _, ref := range refs[:min(len(refs), n)] {
		out = append(out, refString(ref))
	}
	if len(refs) > n {
		out = append(out, fmt.Sprintf("and %d more", len(refs)-n))
	}
	return out
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

// errCannotTell: the read of an object to prune carried no managedFields,
// so whether this Sync applied it is unknown; it stays in the inventory.
var errCannotTell = errors.New("cannot tell whether this Sync applied the object (its read carries no managedFields); kept in the inventory")

func appliedByUs(mfs []metav1.ManagedFieldsEntry) bool {
	for _, mf := range mfs {
		if mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}
