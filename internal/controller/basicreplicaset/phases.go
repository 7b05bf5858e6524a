package basicreplicaset

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

// burstReplicas bounds the Pods created or deleted in one reconcile, as
// kube-controller-manager's --replicaset-burst (500).
const burstReplicas = 500

// slowStartInitialBatch is the first batch of creations; each successful
// batch doubles the next, so a Pod the API refuses fails once, not N times.
const slowStartInitialBatch = 1

// scope carries what one reconcile observed.
type scope struct {
	rs           *workloadsv1alpha1.BasicReplicaSet
	key          types.NamespacedName
	now          time.Time
	pods         []*corev1.Pod // active Pods owned after adoption
	terminating  int           // owned Pods being deleted, not yet stopped
	failure      error         // a create or delete the API refused
	failureVerb  string
	scaling      int // >0 scaling up, <0 down, 0 steady
	requeueAfter time.Duration
}

func (r *Reconciler) reconcilePods(ctx context.Context, s *scope) error {
	rs := s.rs
	sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil || sel.Empty() {
		// Admission rejects these; an object written before the webhook
		// existed must still not select every Pod.
		return fmt.Errorf("invalid selector: %w", errors.Join(err, errors.New("empty selector")))
	}
	list := &corev1.PodList{}
	if err := r.List(ctx, list, client.InNamespace(rs.Namespace)); err != nil {
		return fmt.Errorf("listing Pods: %w", err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		ref := metav1.GetControllerOf(p)
		switch {
		case ref != nil && ref.UID == rs.UID:
			if !sel.Matches(labels.Set(p.Labels)) {
				if err := r.release(ctx, rs, p); err != nil {
					return err
				}
				continue
			}
		case ref == nil && p.DeletionTimestamp.IsZero() && sel.Matches(labels.Set(p.Labels)):
			if err := r.adopt(ctx, rs, p); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					continue // someone else changed it; the event brings us back
				}
				return err
			}
		default:
			continue
		}
		switch {
		case isActive(p):
			s.pods = append(s.pods, p)
		case !p.DeletionTimestamp.IsZero() && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed:
			s.terminating++
		}
	}

	want := int(ptr.Deref(rs.Spec.Replicas, 1))
	diff := want - len(s.pods)
	s.scaling = diff
	if !r.exp.satisfied(s.key) {
		// Wait for the cache to show our last writes; the Pod events bring us
		// back, and the requeue covers an event that never comes.
		s.requeueAfter = expectationsTTL
		return nil
	}
	switch {
	case diff > 0:
		return r.createPods(ctx, s, min(diff, burstReplicas))
	case diff < 0:
		return r.deletePods(ctx, s, min(-diff, burstReplicas))
	}
	return nil
}

func isActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp.IsZero() && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// adopt makes rs the controller of an orphan Pod. The patch carries the
// resourceVersion, so a Pod adopted or changed meanwhile is not taken.
func (r *Reconciler) adopt(ctx context.Context, rs *workloadsv1alpha1.BasicReplicaSet, p *corev1.Pod) error {
	base := p.DeepCopy()
	p.OwnerReferences = append(p.OwnerReferences, *metav1.NewControllerRef(rs, workloadsv1alpha1.GroupVersion.WithKind("BasicReplicaSet")))
	if err := r.Patch(ctx, p, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("adopting Pod %s: %w", p.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Adopted Pod", "Pod", p.Name)
	return nil
}

// release drops rs's controller reference from a Pod that no longer matches.
func (r *Reconciler) release(ctx context.Context, rs *workloadsv1alpha1.BasicReplicaSet, p *corev1.Pod) error {
	base := p.DeepCopy()
	refs := p.OwnerReferences[:0]
	for _, ref := range p.OwnerReferences {
		if ref.UID != rs.UID {
			refs = append(refs, ref)
		}
	}
	p.OwnerReferences = refs
	err := r.Patch(ctx, p, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing Pod %s: %w", p.Name, err)
	}
	return nil
}

// createPods creates n Pods in doubling batches, stopping at the first batch
// with a failure. Creations that did not happen are given back to the
// expectations at once.
func (r *Reconciler) createPods(ctx context.Context, s *scope, n int) error {
	r.exp.expectCreations(s.key, n)
	created := 0
	for batch := slowStartInitialBatch; created < n; batch *= 2 {
		size := min(batch, n-created)
		errs := make([]error, size)
		var wg sync.WaitGroup
		for i := range size {
			wg.Go(func() { errs[i] = r.Create(ctx, newPod(s.rs), client.FieldOwner(FieldManager)) })
		}
		wg.Wait()
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
				s.failure, s.failureVerb = err, "create"
			}
		}
		created += size - failed
		if failed > 0 {
			r.exp.creationsObserved(s.key, n-created) // never coming
			r.Recorder.Eventf(s.rs, nil, corev1.EventTypeWarning, workloadsv1alpha1.FailedCreateReason, "Create",
				"Error creating Pod: %v", s.failure)
			return fmt.Errorf("creating Pods: %w", s.failure)
		}
	}
	r.Recorder.Eventf(s.rs, nil, corev1.EventTypeNormal, "SuccessfulCreate", "Create", "Created %d Pod(s)", created)
	return nil
}

// deletePods deletes the n least valuable Pods.
func (r *Reconciler) deletePods(ctx context.Context, s *scope, n int) error {
	victims := append([]*corev1.Pod(nil), s.pods...)
	sort.SliceStable(victims, func(i, j int) bool { return lessValuable(victims[i], victims[j]) })
	victims = victims[:n]
	uids := make([]types.UID, 0, n)
	for _, p := range victims {
		uids = append(uids, p.UID)
	}
	r.exp.expectDeletions(s.key, uids)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range victims {
		wg.Go(func() {
			err := r.Delete(ctx, p, client.Preconditions{UID: &p.UID})
			if apierrors.IsNotFound(err) {
				err = nil // already gone
			}
			if err != nil {
				r.exp.deletionObserved(s.key, p.UID) // never coming
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.failure, s.failureVerb = err, "delete"
		r.Recorder.Eventf(s.rs, nil, corev1.EventTypeWarning, workloadsv1alpha1.FailedDeleteReason, "Delete", "Error deleting Pod: %v", err)
		return fmt.Errorf("deleting Pods: %w", err)
	}
	r.Recorder.Eventf(s.rs, nil, corev1.EventTypeNormal, "SuccessfulDelete", "Delete", "Deleted %d Pod(s)", n)
	return nil
}

// lessValuable orders Pods to delete first: unscheduled before scheduled,
// pending before running, not ready before ready, more restarts before fewer,
// newer before older.
func lessValuable(a, b *corev1.Pod) bool {
	if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
		return a.Spec.NodeName == ""
	}
	rank := func(p corev1.PodPhase) int {
		switch p {
		case corev1.PodPending:
			return 0
		case corev1.PodUnknown:
			return 1
		}
		return 2
	}
	if rank(a.Status.Phase) != rank(b.Status.Phase) {
		return rank(a.Status.Phase) < rank(b.Status.Phase)
	}
	if podReady(a) != podReady(b) {
		return !podReady(a)
	}
	if ra, rb := restarts(a), restarts(b); ra != rb {
		return ra > rb
	}
	return b.CreationTimestamp.Before(&a.CreationTimestamp)
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func newPod(rs *workloadsv1alpha1.BasicReplicaSet) *corev1.Pod {
	t := rs.Spec.Template.DeepCopy()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    rs.Name + "-",
			Namespace:       rs.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, workloadsv1alpha1.GroupVersion.WithKind("BasicReplicaSet"))},
		},
		Spec: t.Spec,
	}
}
