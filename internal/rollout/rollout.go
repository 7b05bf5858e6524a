// Package rollout implements the `converge rollout` verbs for
// BasicDeployments, as `kubectl rollout` does for Deployments: status,
// history, undo, pause and resume. Every verb reads and writes the API only
// (undo copies an old BasicReplicaSet's template into the BasicDeployment,
// as kubectl does), so the controller needs no special rollback path.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

// FieldManager is the field manager of the verbs' writes.
const FieldManager = "converge-rollout"

// Revision is one entry of a BasicDeployment's history.
type Revision struct {
	// Number is the revision.
	Number int64
	// ReplicaSet is the BasicReplicaSet holding it.
	ReplicaSet *workloadsv1alpha1.BasicReplicaSet
	// ChangeCause is its kubernetes.io/change-cause annotation.
	ChangeCause string
}

// History lists the revisions of a BasicDeployment that still have a
// BasicReplicaSet, oldest first.
func History(ctx context.Context, c client.Reader, key client.ObjectKey) ([]Revision, error) {
	d := &workloadsv1alpha1.BasicDeployment{}
	if err := c.Get(ctx, key, d); err != nil {
		return nil, fmt.Errorf("getting BasicDeployment %s: %w", key, err)
	}
	list := &workloadsv1alpha1.BasicReplicaSetList{}
	if err := c.List(ctx, list, client.InNamespace(key.Namespace)); err != nil {
		return nil, fmt.Errorf("listing BasicReplicaSets: %w", err)
	}
	var out []Revision
	for i := range list.Items {
		rs := &list.Items[i]
		if ref := metav1.GetControllerOf(rs); ref == nil || ref.UID != d.UID {
			continue
		}
		n, err := strconv.ParseInt(rs.Annotations[workloadsv1alpha1.RevisionAnnotation], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, Revision{Number: n, ReplicaSet: rs, ChangeCause: rs.Annotations[workloadsv1alpha1.ChangeCauseAnnotation]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}

// PrintHistory writes the history as `kubectl rollout history` does; with
// revision > 0 it shows that revision's Pod template.
func PrintHistory(w io.Writer, key client.ObjectKey, revs []Revision, revision int64) error {
	if revision > 0 {
		for _, r := range revs {
			if r.Number == revision {
				t := r.ReplicaSet.Spec.Template
				fmt.Fprintf(w, "basicdeployment.workloads.converge.dev/%s with revision #%d\nPod Template:\n", key.Name, revision)
				fmt.Fprintf(w, "  Labels:\t%s\n", labelString(t.Labels))
				for _, c := range t.Spec.Containers {
					fmt.Fprintf(w, "  Containers:\n   %s:\n    Image:\t%s\n", c.Name, c.Image)
				}
				return nil
			}
		}
		return fmt.Errorf("unable to find the specified revision %d", revision)
	}
	fmt.Fprintf(w, "basicdeployment.workloads.converge.dev/%s\nREVISION  CHANGE-CAUSE\n", key.Name)
	for _, r := range revs {
		cause := r.ChangeCause
		if cause == "" {
			cause = "<none>"
		}
		fmt.Fprintf(w, "%-9d %s\n", r.Number, cause)
	}
	return nil
}

func labelString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// ErrAlreadyCurrent is returned by Undo when the revision's template is
// already the BasicDeployment's.
var ErrAlreadyCurrent = errors.New("the template of that revision is already the current one")

// Undo rolls a BasicDeployment back to a revision (0: the one before the
// current one) by copying that BasicReplicaSet's template, without its
// pod-template-hash label, into the spec. The patch carries the
// resourceVersion, so a concurrent edit is not overwritten. It returns the
// revision rolled back to.
func Undo(ctx context.Context, c client.Client, key client.ObjectKey, toRevision int64) (int64, error) {
	revs, err := History(ctx, c, key)
	if err != nil {
		return 0, err
	}
	d := &workloadsv1alpha1.BasicDeployment{}
	if err := c.Get(ctx, key, d); err != nil {
		return 0, fmt.Errorf("getting BasicDeployment %s: %w", key, err)
	}
	if d.Spec.Paused {
		return 0, fmt.Errorf("BasicDeployment %s is paused; run `converge rollout resume` first", key.Name)
	}
	var target *Revision
	switch {
	case toRevision > 0:
		for i := range revs {
			if revs[i].Number == toRevision {
				target = &revs[i]
			}
		}
		if target == nil {
			return 0, fmt.Errorf("unable to find the specified revision %d (have %s)", toRevision, numbers(revs))
		}
	case len(revs) < 2:
		return 0, errors.New("no rollout history found: there is no earlier revision to roll back to")
	default:
		// The latest revision is the current template; the one before it.
		target = &revs[len(revs)-2]
	}
	tmpl := target.ReplicaSet.Spec.Template.DeepCopy()
	delete(tmpl.Labels, workloadsv1alpha1.PodTemplateHashLabel)
	cur := d.Spec.Template.DeepCopy()
	if equalTemplates(cur, tmpl) {
		return target.Number, ErrAlreadyCurrent
	}
	base := d.DeepCopy()
	d.Spec.Template = *tmpl
	if cause, ok := target.ReplicaSet.Annotations[workloadsv1alpha1.ChangeCauseAnnotation]; ok {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[workloadsv1alpha1.ChangeCauseAnnotation] = cause
	}
	if err := c.Patch(ctx, d, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsConflict(err) {
			return 0, fmt.Errorf("BasicDeployment %s changed while rolling back; try again: %w", key.Name, err)
		}
		return 0, fmt.Errorf("rolling back BasicDeployment %s: %w", key.Name, err)
	}
	return target.Number, nil
}

func numbers(revs []Revision) string {
	parts := make([]string, 0, len(revs))
	for _, r := range revs {
		parts = append(parts, strconv.FormatInt(r.Number, 10))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// SetPaused pauses or resumes a BasicDeployment. It fails when it already
// is in that state, as kubectl does.
func SetPaused(ctx context.Context, c client.Client, key client.ObjectKey, paused bool) error {
	d := &workloadsv1alpha1.BasicDeployment{}
	if err := c.Get(ctx, key, d); err != nil {
		return fmt.Errorf("getting BasicDeployment %s: %w", key, err)
	}
	if d.Spec.Paused == paused {
		if paused {
			return fmt.Errorf("basicdeployment/%s is already paused", key.Name)
		}
		return fmt.Errorf("basicdeployment/%s is not paused", key.Name)
	}
	base := d.DeepCopy()
	d.Spec.Paused = paused
	if err := c.Patch(ctx, d, client.MergeFrom(base), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("patching BasicDeployment %s: %w", key.Name, err)
	}
	return nil
}

// ErrDeadlineExceeded is returned by Status when the rollout's progress
// deadline passed.
var ErrDeadlineExceeded = errors.New("rollout exceeded its progress deadline")

// Status reports a rollout's progress to w, as `kubectl rollout status`:
// one line each time the message changes, until the rollout completes (nil),
// its progress deadline passes (ErrDeadlineExceeded), or timeout (0: none)
// runs out. With watch false it reports once.
func Status(ctx context.Context, c client.Reader, key client.ObjectKey, w io.Writer, watch bool, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last := ""
	var result error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d := &workloadsv1alpha1.BasicDeployment{}
		if err := c.Get(ctx, key, d); err != nil {
			if deadline(ctx, err) {
				return false, context.DeadlineExceeded // the timeout, however the client noticed it
			}
			return false, fmt.Errorf("getting BasicDeployment %s: %w", key, err)
		}
		msg, done, err := statusMessage(d)
		if msg != last {
			fmt.Fprintln(w, msg)
			last = msg
		}
		if err != nil || done {
			result = err
			return true, nil
		}
		return !watch, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("timed out waiting for the rollout of basicdeployment/%s", key.Name)
		}
		return err
	}
	return result
}

// deadline reports whether err is ctx's deadline, however it surfaced: the
// context's own error, or client-go's rate limiter refusing to wait past the
// deadline ("rate: Wait(n=1) would exceed context deadline", not wrapped
// as context.DeadlineExceeded).
func deadline(ctx context.Context, err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	_, has := ctx.Deadline()
	return has && strings.Contains(err.Error(), "would exceed context deadline")
}

// statusMessage is kubectl's DeploymentStatusViewer, for BasicDeployments.
func statusMessage(d *workloadsv1alpha1.BasicDeployment) (string, bool, error) {
	name := "basicdeployment/" + d.Name
	if d.Status.ObservedGeneration < d.Generation {
		return "Waiting for basicdeployment spec update to be observed...", false, nil
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition); c != nil &&
		c.Reason == workloadsv1alpha1.ProgressDeadlineExceededReason {
		return fmt.Sprintf("error: %s: %s", name, c.Message), true, ErrDeadlineExceeded
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	switch {
	case d.Spec.Paused:
		return fmt.Sprintf("Waiting for %s: the rollout is paused (`converge rollout resume %s`)", name, name), false, nil
	case st.UpdatedReplicas < want:
		return fmt.Sprintf("Waiting for %s rollout to finish: %d out of %d new replicas have been updated...", name, st.UpdatedReplicas, want), false, nil
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Sprintf("Waiting for %s rollout to finish: %d old replicas are pending termination...", name, st.Replicas-st.UpdatedReplicas), false, nil
	case st.AvailableReplicas < st.UpdatedReplicas:
		return fmt.Sprintf("Waiting for %s rollout to finish: %d of %d updated replicas are available...", name, st.AvailableReplicas, st.UpdatedReplicas), false, nil
	}
	return fmt.Sprintf("%s successfully rolled out", name), true, nil
}
