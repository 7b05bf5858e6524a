package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	gosync "sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/placement"
)

// applyWorkers bounds the concurrent writes of one Sync.
const applyWorkers = 8

// applyAll applies CRDs and Namespaces first, waits for the CRDs to be
// established, then the rest, concurrently. It returns every failure joined.
func (r *Reconciler) applyAll(ctx context.Context, s *scope, c client.Client, objs []*unstructured.Unstructured) error {
	var first, rest []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GroupVersionKind().GroupKind().String() {
		case "CustomResourceDefinition.apiextensions.k8s.io", "Namespace":
			first = append(first, u)
		default:
			rest = append(rest, u)
		}
	}
	if len(first) > 0 {
		if err := r.writeAheadInventory(ctx, s, first); err != nil {
			return err
		}
		if err := r.applyStage(ctx, s, c, first); err != nil {
			return err
		}
		if err := r.waitEstablished(ctx, c, first); err != nil {
			return err
		}
	}
	// Written after the CRDs are established: the scope (and so the
	// namespace) of their kinds is known now.
	if err := r.writeAheadInventory(ctx, s, rest); err != nil {
		return err
	}
	return r.applyStage(ctx, s, c, rest)
}

func (r *Reconciler) applyStage(ctx context.Context, s *scope, c client.Client, objs []*unstructured.Unstructured) error {
	var (
		mu   gosync.Mutex
		errs []error
		wg   gosync.WaitGroup
	)
	work := make(chan *planned)
	for range min(applyWorkers, len(objs)) {
		wg.Go(func() {
			for p := range work {
				if err := r.applyOne(ctx, s, c, p); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range differingFirst(s.st, r.plan(s.sync, objs)) {
		work <- p
	}
	close(work)
	wg.Wait()
	if len(errs) > 5 {
		return fmt.Errorf("%w (and %d more errors)", errors.Join(errs[:5]...), len(errs)-5)
	}
	return errors.Join(errs...)
}

// planned is one object ready to apply, with what both the ordering and
// applyOne need computed once: its namespace, key, desired-state hash and
// the drift cache's view of it.
type planned struct {
	u       *unstructured.Unstructured
	ref     gitopsv1alpha1.ObjectRef
	k       objKey
	hash    digest
	cached  *metav1.PartialObjectMetadata
	inCache bool
}

// plan prepares every object, hashing and looking up in parallel.
func (r *Reconciler) plan(sy *gitopsv1alpha1.Sync, objs []*unstructured.Unstructured) []*planned {
	out := make([]*planned, len(objs))
	var wg gosync.WaitGroup
	workers := min(applyWorkers, len(objs))
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(objs); i += workers {
				// The render cache's object is shared: copy it only when its
				// namespace is decided now (a kind whose CRD came in this
				// revision); applyOne never changes it.
				u := objs[i]
				if ns := r.namespaceOf(sy, u); ns != u.GetNamespace() {
					u = u.DeepCopy()
					u.SetNamespace(ns)
				}
				p := &planned{u: u, ref: refOf(u), hash: hashObject(u)}
				p.k = keyOf(p.ref)
				p.cached, p.inCache = r.drift.lookup(p.ref)
				out[i] = p
			}
		})
	}
	wg.Wait()
	return out
}

// differingFirst orders a plan so that the objects that probably differ
// from their desired state are applied first: missing from the drift cache
// (never applied, deleted, or of a kind not yet watched), last written by
// another field manager, or recorded with another desired state or
// resourceVersion. The rest keep their order and are still applied. A
// replica that just won the Lease has no records: without this it would
// re-apply every unchanged object, in render order, before the drifted one.
func differingFirst(st *syncState, ps []*planned) []*planned {
	first := make([]*planned, 0, len(ps))
	var rest []*planned
	for _, p := range ps {
		if probablyDiffers(st, p) {
			first = append(first, p)
		} else {
			rest = append(rest, p)
		}
	}
	return append(first, rest...)
}

func probablyDiffers(st *syncState, p *planned) bool {
	if !p.inCache || writtenByOthers(p.cached) {
		return true
	}
	rec, ok := st.get(p.k)
	return ok && (rec.hash != p.hash || rec.rv != p.cached.GetResourceVersion())
}

// applyOne converges one object. An object whose desired state and live
// resourceVersion are what the last apply left costs no request. Otherwise
// it is applied (server-side apply is a no-op for an unchanged object, so the
// resourceVersion does not move); under driftPolicy Report an object that
// drifted from an unchanged desired state is only dry-run and reported.
func (r *Reconciler) applyOne(ctx context.Context, s *scope, c client.Client, p *planned) error {
	sy := s.sync
	u, ref, k, hash := p.u, p.ref, p.k, p.hash
	cached, inCache := p.cached, p.inCache
	if inCache && !ownedBy(cached.GetLabels(), sy) {
		// The drift cache is the manager's: say whose the object is only to
		// an identity that may read it (otherwise the apply's own Forbidden
		// is the answer).
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(u.GroupVersionKind())
		switch err := c.Get(ctx, client.ObjectKeyFromObject(u), m); {
		case apierrors.IsNotFound(err):
			inCache = false
		case err != nil:
			s.changes.add(resultSkipped, ref)
			return readError("reading "+refString(ref), err)
		case !ownedBy(m.GetLabels(), sy):
			s.changes.add(resultSkipped, ref)
			return fmt.Errorf("%s is managed by Sync %s/%s", refString(ref),
				m.GetLabels()[gitopsv1alpha1.SyncNamespaceLabel], m.GetLabels()[gitopsv1alpha1.SyncNameLabel])
		}
	}
	rec, hasRec := s.st.get(k)
	if hasRec && rec.hash == hash && inCache && cached.GetResourceVersion() == rec.rv {
		s.changes.add(resultUnchanged, ref)
		return nil
	}
	// Was it applied before with this same desired state? Then a change is
	// drift.
	suspect := hasRec && rec.hash == hash && sy.Status.LastAppliedRevision == s.revision
	var live *unstructured.Unstructured
	if suspect || (sy.Spec.DriftPolicy == gitopsv1alpha1.DriftPolicyReport && sy.Status.LastAppliedRevision == s.revision && inInventory(sy, k)) {
		live = &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), live); err != nil {
			if !apierrors.IsNotFound(err) {
				return readError("reading "+refString(ref)+" for drift", err)
			}
			live = nil
			if sy.Spec.DriftPolicy == gitopsv1alpha1.DriftPolicyReport {
				s.addDrift(ref, []string{"(deleted)"}, nil, driftReported)
				s.changes.add(resultSkipped, ref)
				return nil
			}
			if suspect {
				s.addDrift(ref, []string{"(deleted)"}, nil, driftCorrected)
			}
		}
		if live != nil && sy.Spec.DriftPolicy == gitopsv1alpha1.DriftPolicyReport {
			dry := u.DeepCopy()
			if err := apply(ctx, c, dry, true); err != nil {
				return fmt.Errorf("dry-run applying %s: %w", refString(ref), err)
			}
			fields := diffPaths(live.Object, dry.Object, 16)
			if len(fields) == 0 {
				s.st.set(k, record{hash: hash, rv: live.GetResourceVersion()})
				s.changes.add(resultUnchanged, ref)
				return nil
			}
			s.addDrift(ref, managersOf(live, fields), fields, driftReported)
			s.changes.add(resultSkipped, ref)
			return nil
		}
	}
	prevRV := rec.rv
	if inCache {
		prevRV = cached.GetResourceVersion()
	}
	if live != nil {
		prevRV = live.GetResourceVersion()
	}
	existed := inCache || live != nil
	out := u.DeepCopy()
	err := apply(ctx, c, out, false)
	if err != nil && sy.Spec.Force && isImmutableError(err) {
		err = r.recreate(ctx, c, out)
	}
	if err != nil {
		s.changes.add(resultSkipped, ref)
		return fmt.Errorf("applying %s: %w", refString(ref), err)
	}
	result := resultConfigured
	switch {
	case !existed && onlyManager(out, FieldManager):
		result = resultCreated
	case existed && out.GetResourceVersion() == prevRV:
		result = resultUnchanged
	case !existed && prevRV != "" && out.GetResourceVersion() == prevRV:
		result = resultUnchanged
	}
	if suspect && live != nil && result != resultUnchanged {
		fields := diffPaths(live.Object, out.Object, 16)
		s.addDrift(ref, managersOf(live, fields), fields, driftCorrected)
	}
	if suspect && result != resultUnchanged {
		if t, ok := s.st.takeDriftSeen(k); ok {
			driftCorrectionSeconds.Observe(time.Since(t).Seconds())
		}
	}
	s.st.set(k, record{hash: hash, rv: out.GetResourceVersion()})
	s.changes.add(result, ref)
	return nil
}

// namespaceOf is the namespace an object is applied in
// (placement.Namespace); "" when its kind does not map.
func (r *Reconciler) namespaceOf(sy *gitopsv1alpha1.Sync, u *unstructured.Unstructured) string {
	ns, err := placement.Namespace(r.Mapper, sy, u)
	if err != nil {
		return u.GetNamespace()
	}
	return ns
}

func inInventory(sy *gitopsv1alpha1.Sync, k objKey) bool {
	for _, ref := range sy.Status.Inventory {
		if keyOf(ref) == k {
			return true
		}
	}
	return false
}

func ownedBy(l map[string]string, sy *gitopsv1alpha1.Sync) bool {
	n, ok := l[gitopsv1alpha1.SyncNameLabel]
	return !ok || (n == sy.Name && l[gitopsv1alpha1.SyncNamespaceLabel] == sy.Namespace)
}

func onlyManager(u *unstructured.Unstructured, manager string) bool {
	for _, mf := range u.GetManagedFields() {
		if mf.Manager != manager {
			return false
		}
	}
	return true
}

// apply server-side applies u with the Sync field manager, taking over
// conflicting fields (git is the source of truth), and writes the result
// back into u.
func apply(ctx context.Context, c client.Client, u *unstructured.Unstructured, dryRun bool) error {
	opts := []client.ApplyOption{client.FieldOwner(FieldManager), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	u.SetManagedFields(nil)
	u.SetResourceVersion("")
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}

func isImmutableError(err error) bool {
	return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "immutable")
}

// recreate deletes the object, waits until it is gone, and applies again.
func (r *Reconciler) recreate(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	old := &unstructured.Unstructured{}
	old.SetGroupVersionKind(u.GroupVersionKind())
	old.SetNamespace(u.GetNamespace())
	old.SetName(u.GetName())
	if err := c.Delete(ctx, old, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting to recreate (force): %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(old), old.DeepCopy())
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for the old object to go (force): %w", err)
	}
	return apply(ctx, c, u, false)
}

// waitEstablished waits until the applied CRDs are established and their
// kinds resolve.
func (r *Reconciler) waitEstablished(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, crd); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					// Established comes before discovery shows the kind:
					// wait for the mapper too, or the first apply of its
					// objects fails with "no matches for kind".
					return r.kindResolves(crd), nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition %s is not established: %w", u.GetName(), err)
		}
	}
	return nil
}

// kindResolves reports whether the RESTMapper maps a served version of
// crd's kind.
func (r *Reconciler) kindResolves(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		if _, err := r.Mapper.RESTMapping(schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}, v.Name); err == nil {
			return true
		}
	}
	return false
}
