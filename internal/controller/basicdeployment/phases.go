package basicdeployment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/sharding"
)

// scope carries what one reconcile observed and did.
type scope struct {
	d            *workloadsv1alpha1.BasicDeployment
	now          time.Time
	all          []*workloadsv1alpha1.BasicReplicaSet // owned, not being deleted
	newRS        *workloadsv1alpha1.BasicReplicaSet   // the child with the current template
	oldRSs       []*workloadsv1alpha1.BasicReplicaSet
	createdNewRS bool
	createErr    error // the API refused the new child
	requeueAfter time.Duration
}

func (r *Reconciler) reconcileReplicaSets(ctx context.Context, s *scope) error {
	d := s.d
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() {
		// Admission rejects these; an object stored before the webhook
		// existed must still not claim every BasicReplicaSet.
		return fmt.Errorf("invalid selector: %w", errors.Join(err, errors.New("empty selector")))
	}
	if err := r.claim(ctx, s, sel); err != nil {
		return err
	}
	s.newRS, s.oldRSs = splitNewOld(d, s.all)

	if d.Spec.Paused || isScalingEvent(d, s.all) {
		// As kube-controller-manager: a paused BasicDeployment still scales,
		// but starts no rollout.
		if err := r.syncRevision(ctx, s); err != nil {
			return err
		}
		if err := r.scale(ctx, s); err != nil {
			return err
		}
		if d.Spec.Paused {
			return r.cleanupHistory(ctx, s)
		}
		return nil
	}
	if isRolling(d) {
		return r.rolloutRolling(ctx, s)
	}
	return r.rolloutRecreate(ctx, s)
}

// claim collects the BasicReplicaSets this BasicDeployment controls,
// adopting matching orphans and releasing owned ones that no longer match.
// Both patches carry the resourceVersion, so nothing is taken from under
// another writer.
func (r *Reconciler) claim(ctx context.Context, s *scope, sel labels.Selector) error {
	d := s.d
	list := &workloadsv1alpha1.BasicReplicaSetList{}
	if err := r.List(ctx, list, client.InNamespace(d.Namespace)); err != nil {
		return fmt.Errorf("listing BasicReplicaSets: %w", err)
	}
	for i := range list.Items {
		rs := &list.Items[i]
		ref := metav1.GetControllerOf(rs)
		matches := sel.Matches(labels.Set(rs.Labels))
		switch {
		case ref != nil && ref.UID == d.UID:
			if !matches {
				if err := r.patchOwner(ctx, rs, func(refs []metav1.OwnerReference) []metav1.OwnerReference {
					out := refs[:0]
					for _, o := range refs {
						if o.UID != d.UID {
							out = append(out, o)
						}
					}
					return out
				}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("releasing BasicReplicaSet %s: %w", rs.Name, err)
				}
				continue
			}
		case ref == nil && rs.DeletionTimestamp.IsZero() && matches:
			if err := r.patchOwner(ctx, rs, func(refs []metav1.OwnerReference) []metav1.OwnerReference {
				return append(refs, *metav1.NewControllerRef(d, workloadsv1alpha1.GroupVersion.WithKind("BasicDeployment")))
			}); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					continue // changed meanwhile; its event brings us back
				}
				return fmt.Errorf("adopting BasicReplicaSet %s: %w", rs.Name, err)
			}
			ctrl.LoggerFrom(ctx).Info("Adopted BasicReplicaSet", "BasicReplicaSet", rs.Name)
		default:
			continue
		}
		if rs.DeletionTimestamp.IsZero() {
			s.all = append(s.all, rs)
		}
	}
	return nil
}

func (r *Reconciler) patchOwner(ctx context.Context, rs *workloadsv1alpha1.BasicReplicaSet, f func([]metav1.OwnerReference) []metav1.OwnerReference) error {
	base := rs.DeepCopy()
	rs.OwnerReferences = f(rs.OwnerReferences)
	return r.Patch(ctx, rs, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager))
}

// splitNewOld finds the child whose template is the current one (the
// oldest, if several are) and the others.
func splitNewOld(d *workloadsv1alpha1.BasicDeployment, all []*workloadsv1alpha1.BasicReplicaSet) (*workloadsv1alpha1.BasicReplicaSet, []*workloadsv1alpha1.BasicReplicaSet) {
	var newRS *workloadsv1alpha1.BasicReplicaSet
	for _, rs := range all {
		if equalIgnoreHash(&rs.Spec.Template, &d.Spec.Template) &&
			(newRS == nil || rs.CreationTimestamp.Before(&newRS.CreationTimestamp)) {
			newRS = rs
		}
	}
	var old []*workloadsv1alpha1.BasicReplicaSet
	for _, rs := range all {
		if rs != newRS {
			old = append(old, rs)
		}
	}
	return newRS, old
}

// isScalingEvent reports whether spec.replicas changed since the active
// children were last scaled.
func isScalingEvent(d *workloadsv1alpha1.BasicDeployment, all []*workloadsv1alpha1.BasicReplicaSet) bool {
	want := strconv.Itoa(int(replicas(d)))
	for _, rs := range all {
		if specReplicas(rs) > 0 && rs.Annotations[workloadsv1alpha1.DesiredReplicasAnnotation] != want {
			return true
		}
	}
	return false
}

func (r *Reconciler) rolloutRolling(ctx context.Context, s *scope) error {
	if s.newRS == nil {
		return r.createNewRS(ctx, s, newRSReplicas(s.d, s.all, nil))
	}
	if err := r.syncRevision(ctx, s); err != nil {
		return err
	}
	if scaled, err := r.reconcileNewRS(ctx, s); err != nil || scaled {
		return err
	}
	if scaled, err := r.reconcileOldRSs(ctx, s); err != nil || scaled {
		return err
	}
	if complete(s) {
		return r.cleanupHistory(ctx, s)
	}
	return nil
}

// reconcileNewRS grows the new child as far as maxSurge allows (or shrinks
// it to replicas).
func (r *Reconciler) reconcileNewRS(ctx context.Context, s *scope) (bool, error) {
	want := replicas(s.d)
	cur := specReplicas(s.newRS)
	switch {
	case cur == want:
		return false, nil
	case cur > want:
		return r.scaleRS(ctx, s, s.newRS, want)
	}
	return r.scaleRS(ctx, s, s.newRS, newRSReplicas(s.d, s.all, s.newRS))
}

// reconcileOldRSs shrinks old children while at least replicas -
// maxUnavailable Pods stay available: first the Pods that are not available
// anyway, then available ones, oldest revision first.
func (r *Reconciler) reconcileOldRSs(ctx context.Context, s *scope) (bool, error) {
	if sum(s.oldRSs, specReplicas) == 0 {
		return false, nil
	}
	minAvailable := replicas(s.d) - maxUnavailable(s.d)
	newUnavailable := specReplicas(s.newRS) - availableBound(s.newRS)
	maxScaleDown := sum(s.all, podBound) - minAvailable - newUnavailable
	if maxScaleDown <= 0 {
		return false, nil
	}
	scaled := false
	// Unavailable old Pods cost no availability to remove.
	var cleaned int32
	for _, rs := range byAge(s.oldRSs) {
		if cleaned >= maxScaleDown {
			break
		}
		unhealthy := specReplicas(rs) - availableBound(rs)
		if unhealthy <= 0 {
			continue
		}
		n := min(unhealthy, maxScaleDown-cleaned)
		ok, err := r.scaleRS(ctx, s, rs, specReplicas(rs)-n)
		if err != nil {
			return scaled, err
		}
		scaled = scaled || ok
		cleaned += n
	}
	budget := sum(s.all, availableBound) - minAvailable
	if budget <= 0 {
		return scaled, nil
	}
	var done int32
	for _, rs := range byAge(s.oldRSs) {
		if done >= budget {
			break
		}
		if specReplicas(rs) == 0 {
			continue
		}
		n := min(specReplicas(rs), budget-done)
		ok, err := r.scaleRS(ctx, s, rs, specReplicas(rs)-n)
		if err != nil {
			return scaled, err
		}
		scaled = scaled || ok
		done += n
	}
	return scaled, nil
}

// rolloutRecreate scales every old child to zero, waits until their Pods
// are gone, then scales the new one up.
func (r *Reconciler) rolloutRecreate(ctx context.Context, s *scope) error {
	scaled := false
	for _, rs := range s.oldRSs {
		if specReplicas(rs) == 0 {
			continue
		}
		ok, err := r.scaleRS(ctx, s, rs, 0)
		if err != nil {
			return err
		}
		scaled = scaled || ok
	}
	if scaled {
		return nil
	}
	for _, rs := range s.oldRSs {
		if rs.Status.Replicas > 0 || rs.Status.TerminatingReplicas > 0 || rs.Status.ObservedGeneration < rs.Generation {
			return nil // its status update brings us back
		}
	}
	if s.newRS == nil {
		return r.createNewRS(ctx, s, replicas(s.d))
	}
	if err := r.syncRevision(ctx, s); err != nil {
		return err
	}
	if scaled, err := r.scaleRS(ctx, s, s.newRS, replicas(s.d)); err != nil || scaled {
		return err
	}
	if complete(s) {
		return r.cleanupHistory(ctx, s)
	}
	return nil
}

// scale resizes the children when spec.replicas changed (or while paused):
// the only active child takes it all; otherwise the change is spread in
// proportion to their sizes within replicas + maxSurge.
func (r *Reconciler) scale(ctx context.Context, s *scope) error {
	d := s.d
	var active []*workloadsv1alpha1.BasicReplicaSet
	for _, rs := range s.all {
		if specReplicas(rs) > 0 {
			active = append(active, rs)
		}
	}
	if target := activeOrLatest(s, active); target != nil {
		_, err := r.scaleRS(ctx, s, target, replicas(d))
		return err
	}
	if s.newRS != nil && specReplicas(s.newRS) == replicas(d) && s.newRS.Status.AvailableReplicas >= replicas(d) {
		for _, rs := range s.oldRSs {
			if _, err := r.scaleRS(ctx, s, rs, 0); err != nil {
				return err
			}
		}
		return nil
	}
	allowed := replicas(d) + maxSurge(d)
	if replicas(d) == 0 {
		allowed = 0
	}
	sizes := proportions(active, allowed-sum(active, specReplicas))
	for i, rs := range active {
		if _, err := r.scaleRS(ctx, s, rs, sizes[i]); err != nil {
			return err
		}
	}
	return nil
}

// activeOrLatest is the one child to give all replicas to: the only active
// one, or with none active the new one (else the newest).
func activeOrLatest(s *scope, active []*workloadsv1alpha1.BasicReplicaSet) *workloadsv1alpha1.BasicReplicaSet {
	switch len(active) {
	case 0:
		if s.newRS != nil {
			return s.newRS
		}
		if n := len(s.oldRSs); n > 0 {
			return byAge(s.oldRSs)[n-1]
		}
		return nil
	case 1:
		return active[0]
	}
	return nil
}

// scaleRS sets a child's replicas and the parent's sizes in its annotations.
// The patch carries the resourceVersion: a decision made on a stale cache
// fails with a conflict and is made again on fresh data.
func (r *Reconciler) scaleRS(ctx context.Context, s *scope, rs *workloadsv1alpha1.BasicReplicaSet, n int32) (bool, error) {
	d := s.d
	desired := strconv.Itoa(int(replicas(d)))
	maxReplicas := strconv.Itoa(int(replicas(d) + maxSurge(d)))
	from := specReplicas(rs)
	if from == n && rs.Annotations[workloadsv1alpha1.DesiredReplicasAnnotation] == desired &&
		rs.Annotations[workloadsv1alpha1.MaxReplicasAnnotation] == maxReplicas {
		return false, nil
	}
	base := rs.DeepCopy()
	rs.Spec.Replicas = ptr.To(n)
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	rs.Annotations[workloadsv1alpha1.DesiredReplicasAnnotation] = desired
	rs.Annotations[workloadsv1alpha1.MaxReplicasAnnotation] = maxReplicas
	if err := r.Patch(ctx, rs, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		*rs = *base
		return false, fmt.Errorf("scaling BasicReplicaSet %s to %d: %w", rs.Name, n, err)
	}
	if from != n {
		verb := "up"
		if n < from {
			verb = "down"
		}
		r.Recorder.Eventf(d, rs, corev1.EventTypeNormal, "ScalingReplicaSet", "Scale",
			"Scaled %s BasicReplicaSet %s to %d from %d", verb, rs.Name, n, from)
	}
	return from != n, nil
}

// syncRevision gives the new child the next revision number when its
// template came back from history (a rollback), remembering its earlier
// revisions, and keeps its change-cause in step with the parent.
func (r *Reconciler) syncRevision(ctx context.Context, s *scope) error {
	rs := s.newRS
	if rs == nil {
		return nil
	}
	want := max(revision(rs), maxRevision(s.oldRSs)+1)
	cause, hasCause := s.d.Annotations[workloadsv1alpha1.ChangeCauseAnnotation]
	if revision(rs) == want && (!hasCause || rs.Annotations[workloadsv1alpha1.ChangeCauseAnnotation] == cause) {
		return nil
	}
	base := rs.DeepCopy()
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	if old := revision(rs); old != 0 && old != want {
		hist := rs.Annotations[workloadsv1alpha1.RevisionHistoryAnnotation]
		rs.Annotations[workloadsv1alpha1.RevisionHistoryAnnotation] = strings.TrimPrefix(hist+","+strconv.FormatInt(old, 10), ",")
	}
	rs.Annotations[workloadsv1alpha1.RevisionAnnotation] = strconv.FormatInt(want, 10)
	if hasCause {
		rs.Annotations[workloadsv1alpha1.ChangeCauseAnnotation] = cause
	}
	if err := r.Patch(ctx, rs, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		*rs = *base
		return fmt.Errorf("setting the revision of BasicReplicaSet %s: %w", rs.Name, err)
	}
	return nil
}

// createNewRS creates the child for the current template, named after the
// template's hash.
func (r *Reconciler) createNewRS(ctx context.Context, s *scope, n int32) error {
	d := s.d
	hash := templateHash(&d.Spec.Template, d.Status.CollisionCount)
	tmpl := d.Spec.Template.DeepCopy()
	tmpl.Labels = withLabel(tmpl.Labels, workloadsv1alpha1.PodTemplateHashLabel, hash)
	sel := d.Spec.Selector.DeepCopy()
	sel.MatchLabels = withLabel(sel.MatchLabels, workloadsv1alpha1.PodTemplateHashLabel, hash)
	rsLabels := maps.Clone(tmpl.Labels)
	if shard, ok := d.Labels[sharding.Label]; ok {
		rsLabels[sharding.Label] = shard
	}
	ann := map[string]string{
		workloadsv1alpha1.RevisionAnnotation:        strconv.FormatInt(maxRevision(s.oldRSs)+1, 10),
		workloadsv1alpha1.DesiredReplicasAnnotation: strconv.Itoa(int(replicas(d))),
		workloadsv1alpha1.MaxReplicasAnnotation:     strconv.Itoa(int(replicas(d) + maxSurge(d))),
	}
	if cause, ok := d.Annotations[workloadsv1alpha1.ChangeCauseAnnotation]; ok {
		ann[workloadsv1alpha1.ChangeCauseAnnotation] = cause
	}
	rs := &workloadsv1alpha1.BasicReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            d.Name + "-" + hash,
			Namespace:       d.Namespace,
			Labels:          rsLabels,
			Annotations:     ann,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, workloadsv1alpha1.GroupVersion.WithKind("BasicDeployment"))},
		},
		Spec: workloadsv1alpha1.BasicReplicaSetSpec{
			Replicas:        ptr.To(n),
			Selector:        sel,
			Template:        *tmpl,
			MinReadySeconds: d.Spec.MinReadySeconds,
		},
	}
	err := r.Create(ctx, rs, client.FieldOwner(FieldManager))
	if apierrors.IsAlreadyExists(err) {
		existing := &workloadsv1alpha1.BasicReplicaSet{}
		if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(rs), existing); gerr != nil {
			return fmt.Errorf("reading BasicReplicaSet %s after AlreadyExists: %w", rs.Name, gerr)
		}
		if ref := metav1.GetControllerOf(existing); ref != nil && ref.UID == d.UID && equalIgnoreHash(&existing.Spec.Template, &d.Spec.Template) {
			if !existing.DeletionTimestamp.IsZero() {
				return fmt.Errorf("BasicReplicaSet %s is being deleted; waiting for it to go", rs.Name)
			}
			// Our cache had not seen our own child yet.
			s.newRS = existing
			s.all = append(s.all, existing)
			return nil
		}
		// Another object holds the name: hash again with a new count.
		d.Status.CollisionCount = ptr.To(ptr.Deref(d.Status.CollisionCount, 0) + 1)
		return fmt.Errorf("the name %s of the new BasicReplicaSet is taken by another object; collision count is now %d", rs.Name, *d.Status.CollisionCount)
	}
	if err != nil {
		s.createErr = err
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, workloadsv1alpha1.FailedCreateReplicaSetReason, "Create",
			"Failed to create BasicReplicaSet %s: %v", rs.Name, err)
		return fmt.Errorf("creating BasicReplicaSet %s: %w", rs.Name, err)
	}
	s.newRS, s.createdNewRS = rs, true
	s.all = append(s.all, rs)
	r.Recorder.Eventf(d, rs, corev1.EventTypeNormal, "ScalingReplicaSet", "Scale",
		"Scaled up BasicReplicaSet %s to %d", rs.Name, n)
	return nil
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	out[k] = v
	return out
}

// cleanupHistory deletes the oldest children scaled to zero beyond
// revisionHistoryLimit.
func (r *Reconciler) cleanupHistory(ctx context.Context, s *scope) error {
	limit := int(ptr.Deref(s.d.Spec.RevisionHistoryLimit, 10))
	var idle []*workloadsv1alpha1.BasicReplicaSet
	for _, rs := range s.oldRSs {
		if specReplicas(rs) == 0 && rs.Status.Replicas == 0 && rs.Status.TerminatingReplicas == 0 &&
			rs.Status.ObservedGeneration >= rs.Generation {
			idle = append(idle, rs)
		}
	}
	if len(idle) <= limit {
		return nil
	}
	for _, rs := range byAge(idle)[:len(idle)-limit] {
		err := r.Delete(ctx, rs, client.Preconditions{UID: &rs.UID, ResourceVersion: &rs.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting old BasicReplicaSet %s: %w", rs.Name, err)
		}
	}
	return nil
}

// complete reports whether the rollout is done: the new child has every
// replica available and no old child has Pods.
func complete(s *scope) bool {
	rs := s.newRS
	want := replicas(s.d)
	if rs == nil || specReplicas(rs) != want || rs.Status.ObservedGeneration < rs.Generation ||
		rs.Status.Replicas != want || rs.Status.AvailableReplicas < want {
		return false
	}
	for _, o := range s.oldRSs {
		if specReplicas(o) != 0 || o.Status.Replicas != 0 {
			return false
		}
	}
	return true
}
