// Package reconcilecli implements `converge reconcile KIND/NAME`: it sets
// the reconcile kit's RequestedAtAnnotation (pkg/reconcile) on an object of
// any kind whose controller honours it (graph.Kinds, Requestable) and waits
// until the controller records the request as handled
// (status.lastHandledReconcileAt). The kinds come from that one table; the
// objects are read as unstructured, so a kind added there needs no code
// here.
package reconcilecli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/graph"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// FieldManager is the field manager of the verb's writes.
const FieldManager = "converge-cli"

// The kstatus conditions every requestable kind reports.
const (
	readyCondition       = "Ready"
	reconcilingCondition = "Reconciling"
)

// ParseArgs reads the verb's arguments, KIND/NAME or KIND NAME, in
// namespace ns, and refuses a kind whose controller does not honour the
// request.
func ParseArgs(args []string, ns string) (graph.Ref, error) {
	arg := strings.Join(args, "/")
	if len(args) == 2 && strings.Contains(args[0], "/") {
		return graph.Ref{}, fmt.Errorf("%q %q: want KIND/NAME or KIND NAME", args[0], args[1])
	}
	ref, err := graph.ParseRef(arg, ns)
	if err != nil {
		return graph.Ref{}, err
	}
	if !graph.IsRequestable(ref.GVK()) {
		return graph.Ref{}, fmt.Errorf("%s cannot be asked to reconcile: want one of %s", strings.ToLower(ref.Kind), strings.Join(graph.Requestable(), ", "))
	}
	return ref, nil
}

// Reconcile asks the controller of ref to reconcile it now, by setting
// reconcile.RequestedAtAnnotation, and, with timeout > 0, waits until the
// controller has handled the request (status.lastHandledReconcileAt, and
// not Reconciling) and prints its Ready condition.
func Reconcile(ctx context.Context, c client.Client, out io.Writer, ref graph.Ref, timeout time.Duration) error {
	kind := strings.ToLower(ref.Kind)
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(ref.GVK())
	if err := c.Get(ctx, key, obj); err != nil {
		return err
	}
	stamp := time.Now().UTC().Format(time.RFC3339Nano)
	p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, reconcile.RequestedAtAnnotation, stamp)
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, p), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("requesting a reconcile: %w", err)
	}
	fmt.Fprintf(out, "► reconcile of %s %s requested\n", kind, key)
	if timeout <= 0 {
		return nil
	}
	var conds []metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, obj); err != nil {
			return false, err
		}
		handled, _, _ := unstructured.NestedString(obj.Object, "status", "lastHandledReconcileAt")
		var err error
		if conds, err = conditions(obj); err != nil {
			return false, fmt.Errorf("reading the conditions of %s %s: %w", kind, key, err)
		}
		return handled == stamp && !meta.IsStatusConditionTrue(conds, reconcilingCondition), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s %s to be reconciled: %w", kind, key, err)
	}
	ready := meta.FindStatusCondition(conds, readyCondition)
	if ready == nil {
		return fmt.Errorf("%s %s has no Ready condition", kind, key)
	}
	if ready.Status != metav1.ConditionTrue {
		return fmt.Errorf("%s %s is not ready: %s: %s", kind, key, ready.Reason, ready.Message)
	}
	fmt.Fprintf(out, "✔ %s\n", ready.Message)
	return nil
}

// conditions reads status.conditions of u.
func conditions(u *unstructured.Unstructured) ([]metav1.Condition, error) {
	raw, ok, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil || !ok {
		return nil, err
	}
	out := make([]metav1.Condition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a condition is a %T, not an object", r)
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
