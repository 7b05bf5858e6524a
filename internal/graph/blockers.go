package graph

import (
	"context"
	"fmt"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var pdbGVK = schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}

// refusedPhrase is what the drain (internal/drain's callers: the Machine
// and MachineUpgrade controllers) writes in a condition's message when a
// PodDisruptionBudget refuses an eviction (429), followed by the refused
// Pods as "namespace/name, ..." (Pods of another namespace than the
// object's are never named there).
const refusedPhrase = "a PodDisruptionBudget refuses the eviction of "

// refusedPods reads the Pods (in u's namespace) whose eviction a
// PodDisruptionBudget refuses, from u's condition messages.
func refusedPods(u *unstructured.Unstructured) []string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	seen := map[string]bool{}
	var out []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		msg, _ := m["message"].(string)
		for {
			i := strings.Index(msg, refusedPhrase)
			if i < 0 {
				break
			}
			msg = msg[i+len(refusedPhrase):]
			list, _, _ := strings.Cut(msg, ";")
			list, _, _ = strings.Cut(list, " and ")
			for _, p := range strings.Split(list, ", ") {
				ns, name, ok := strings.Cut(strings.TrimSpace(p), "/")
				if !ok || ns != u.GetNamespace() || name == "" || strings.ContainsAny(name, " /") || seen[name] {
					continue
				}
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out
}

// blockers are the PodDisruptionBudgets holding a drain of n (a Machine
// being deleted, a MachineUpgrade draining a Machine): those of n's
// namespace that select a Pod whose eviction was refused. They are read
// with the caller's identity: a PodDisruptionBudget it may not list is not
// shown.
func (w *walk) blockers(ctx context.Context, n *Node) []Link {
	if n.obj == nil {
		return nil
	}
	return w.blockersOf(ctx, n.obj)
}

// blockersOf are the PodDisruptionBudgets holding a drain of u (an object
// of a Drains kind), read as blockers says.
func (w *walk) blockersOf(ctx context.Context, u *unstructured.Unstructured) []Link {
	pods := refusedPods(u)
	if len(pods) == 0 {
		return nil
	}
	pdbs := w.list(ctx, pdbGVK, u.GetNamespace())
	if len(pdbs) == 0 {
		return nil
	}
	podList := w.list(ctx, podGVK, u.GetNamespace())
	byName := map[string]*unstructured.Unstructured{}
	for i := range podList {
		byName[podList[i].GetName()] = &podList[i]
	}
	var out []Link
	seen := map[string]bool{}
	for _, name := range pods {
		p := byName[name]
		if p == nil {
			continue
		}
		for i := range pdbs {
			sel, _, _ := unstructured.NestedMap(pdbs[i].Object, "spec", "selector")
			if sel == nil || seen[pdbs[i].GetName()] {
				continue
			}
			ls := &metav1.LabelSelector{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(sel, ls) != nil {
				continue
			}
			s, err := metav1.LabelSelectorAsSelector(ls)
			if err != nil || s.Empty() || !s.Matches(labels.Set(p.GetLabels())) {
				continue
			}
			seen[pdbs[i].GetName()] = true
			out = append(out, Link{BlockedBy, refOf(&pdbs[i])})
		}
	}
	return out
}

// blocked are the objects whose drain the PodDisruptionBudget n holds (the
// reverse of blockers, for Graph.Up): the objects of n's namespace, of
// every Drains kind, whose blockers name n.
func (w *walk) blocked(ctx context.Context, n *Node) []Link {
	if n.obj == nil || n.Ref.Group != pdbGVK.Group || n.Ref.Kind != pdbGVK.Kind {
		return nil
	}
	var out []Link
	for _, k := range Kinds {
		if !k.Drains {
			continue
		}
		items := w.list(ctx, k.GVK, n.Ref.Namespace)
		for i := range items {
			for _, l := range w.blockersOf(ctx, &items[i]) {
				if l.To.Name == n.Ref.Name {
					out = append(out, Link{BlockedBy, refOf(&items[i])})
				}
			}
		}
	}
	return out
}

// pdbStatus reads a PodDisruptionBudget: InProgress while it allows no
// disruption (it refuses every eviction then), with its numbers, Current
// otherwise.
func pdbStatus(u *unstructured.Unstructured) (Status, string, string) {
	pdb := &policyv1.PodDisruptionBudget{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, pdb); err != nil {
		return Unknown, "", fmt.Sprintf("reading the PodDisruptionBudget: %v", err)
	}
	if pdb.Status.DisruptionsAllowed > 0 && pdb.Status.ObservedGeneration >= pdb.Generation {
		return Current, "", fmt.Sprintf("allows %d disruption(s)", pdb.Status.DisruptionsAllowed)
	}
	budget := "maxUnavailable " + intOrString(pdb.Spec.MaxUnavailable)
	if pdb.Spec.MinAvailable != nil {
		budget = "minAvailable " + intOrString(pdb.Spec.MinAvailable)
	}
	reason := "NoDisruptionAllowed"
	for _, c := range pdb.Status.Conditions {
		if c.Type == policyv1.DisruptionAllowedCondition && c.Status == metav1.ConditionFalse && c.Reason != "" {
			reason = c.Reason
		}
	}
	return InProgress, reason, fmt.Sprintf("allows no disruption (%s; %d of %d Pods healthy, %d desired): it refuses every eviction of the Pods it selects",
		budget, pdb.Status.CurrentHealthy, pdb.Status.ExpectedPods, pdb.Status.DesiredHealthy)
}

func intOrString(v *intstr.IntOrString) string {
	if v == nil {
		return "unset"
	}
	return v.String()
}
