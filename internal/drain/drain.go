// Package drain cordons Nodes and evicts their Pods through the Eviction
// API, as kubectl drain does, so that PodDisruptionBudgets are honoured. It
// is shared by the Machine controller (drain before deletion) and the
// MachineUpgrade controller (drain before a power cycle). Each call is one
// level-based pass: callers call it again until nothing is left.
package drain

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cordon marks node unschedulable, unless it already is, and reports
// whether it wrote.
func Cordon(ctx context.Context, c client.Client, node *corev1.Node, opts ...client.PatchOption) (bool, error) {
	return setUnschedulable(ctx, c, node, true, opts...)
}

// Uncordon marks node schedulable, unless it already is, and reports
// whether it wrote.
func Uncordon(ctx context.Context, c client.Client, node *corev1.Node, opts ...client.PatchOption) (bool, error) {
	return setUnschedulable(ctx, c, node, false, opts...)
}

func setUnschedulable(ctx context.Context, c client.Client, node *corev1.Node, v bool, opts ...client.PatchOption) (bool, error) {
	if node.Spec.Unschedulable == v {
		return false, nil
	}
	base := node.DeepCopy()
	node.Spec.Unschedulable = v
	if err := c.Patch(ctx, node, client.MergeFrom(base), opts...); err != nil {
		verb := "cordoning"
		if !v {
			verb = "uncordoning"
		}
		return false, fmt.Errorf("%s Node %s: %w", verb, node.Name, err)
	}
	return true, nil
}

// Result is what one eviction pass saw.
type Result struct {
	// Waiting are the Pods ("namespace/name") still on the Node that the
	// drain waits for (being deleted, just evicted, or refused).
	Waiting []string
	// Refused are the Pods whose eviction a PodDisruptionBudget refused
	// (429 Too Many Requests).
	Refused []string
	// Evicted are the Pods evicted in this pass.
	Evicted []*corev1.Pod
}

// Done reports whether nothing is left to evict.
func (r Result) Done() bool { return len(r.Waiting) == 0 }

// Evict asks the Eviction API to evict every Pod on node that a drain
// evicts (see [Skip]). reader must read uncached and list Pods by the
// spec.nodeName field (the API server's field selector).
func Evict(ctx context.Context, c client.Client, reader client.Reader, node string) (Result, error) {
	var res Result
	pods := &corev1.PodList{}
	if err := reader.List(ctx, pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return res, fmt.Errorf("listing Pods on Node %s: %w", node, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if Skip(p) {
			continue
		}
		res.Waiting = append(res.Waiting, p.Namespace+"/"+p.Name)
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		err := c.SubResource("eviction").Create(ctx, p, ev)
		switch {
		case err == nil:
			res.Evicted = append(res.Evicted, p)
		case apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			res.Refused = append(res.Refused, p.Namespace+"/"+p.Name)
		default:
			return res, fmt.Errorf("evicting Pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return res, nil
}

// Skip reports whether a drain leaves p alone: DaemonSet Pods (they would
// come back), mirror Pods and Pods that have finished, as kubectl drain
// does.
func Skip(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return true
	}
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return true
	}
	return false
}

// OtherNamespace stands for a Pod of a namespace other than the reader's.
const OtherNamespace = "(a Pod of another namespace)"

// In is r as a reader of namespace ns may see it: Pods of ns by
// "namespace/name", every other one as OtherNamespace (after ns's own).
// A Machine's status and Events are read by its namespace's tenant, and its
// Node may run Pods of other namespaces (tolerating the tenant taint, or
// bound by nodeName): their names are not the tenant's to read. Evicted
// keeps the Pods; name them with [Name].
func (r Result) In(ns string) Result {
	hide := func(names []string) []string {
		var own []string
		others := 0
		for _, n := range names {
			if strings.HasPrefix(n, ns+"/") {
				own = append(own, n)
			} else {
				others++
			}
		}
		for range others {
			own = append(own, OtherNamespace)
		}
		return own
	}
	return Result{Waiting: hide(r.Waiting), Refused: hide(r.Refused), Evicted: r.Evicted}
}

// Name is p as a reader of namespace ns may see it: "namespace/name" when
// p is ns's, else OtherNamespace.
func Name(ns string, p *corev1.Pod) string {
	if p.Namespace != ns {
		return OtherNamespace
	}
	return p.Namespace + "/" + p.Name
}

// JoinNames joins at most limit names, then says how many more there are.
func JoinNames(names []string, limit int) string {
	if len(names) > limit {
		return strings.Join(names[:limit], ", ") + fmt.Sprintf(" and %d more", len(names)-limit)
	}
	return strings.Join(names, ", ")
}
