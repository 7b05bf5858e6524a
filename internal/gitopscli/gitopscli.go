// Package gitopscli implements the gitops verbs of the converge CLI:
// `converge reconcile sync|gitrepository NAME`, `converge sync approve-prune
// NAME` and `converge diff sync NAME`. cmd/converge only parses flags.
package gitopscli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// FieldManager is the field manager of the CLI's writes.
const FieldManager = "converge-cli"

// Kind is a kind the reconcile verb knows.
type Kind string

// Kinds of the reconcile verb.
const (
	KindSync          Kind = "sync"
	KindGitRepository Kind = "gitrepository"
)

// ParseKind accepts the kind's names and short names.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "sync", "syncs", "sy":
		return KindSync, nil
	case "gitrepository", "gitrepositories", "gitrepo":
		return KindGitRepository, nil
	}
	return "", fmt.Errorf("unknown kind %q: want sync or gitrepository", s)
}

// Reconcile asks the controller to reconcile an object now, by setting
// converge.dev/reconcile-requested-at, and, with timeout > 0, waits until the
// controller has handled the request and prints its Ready condition.
func Reconcile(ctx context.Context, c client.Client, out io.Writer, kind Kind, key types.NamespacedName, timeout time.Duration) error {
	var obj client.Object
	switch kind {
	case KindSync:
		obj = &gitopsv1alpha1.Sync{}
	case KindGitRepository:
		obj = &gitopsv1alpha1.GitRepository{}
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	if err := c.Get(ctx, key, obj); err != nil {
		return err
	}
	stamp := time.Now().UTC().Format(time.RFC3339Nano)
	p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ReconcileRequestAnnotation, stamp)
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
		var handled string
		switch o := obj.(type) {
		case *gitopsv1alpha1.Sync:
			handled, conds = o.Status.LastHandledReconcileAt, o.Status.Conditions
		case *gitopsv1alpha1.GitRepository:
			handled, conds = o.Status.LastHandledReconcileAt, o.Status.Conditions
		}
		return handled == stamp && !meta.IsStatusConditionTrue(conds, gitopsv1alpha1.ReconcilingCondition), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s %s to be reconciled: %w", kind, key, err)
	}
	ready := meta.FindStatusCondition(conds, gitopsv1alpha1.ReadyCondition)
	if ready == nil {
		return fmt.Errorf("%s %s has no Ready condition", kind, key)
	}
	if ready.Status != metav1.ConditionTrue {
		return fmt.Errorf("%s %s is not ready: %s: %s", kind, key, ready.Reason, ready.Message)
	}
	fmt.Fprintf(out, "✔ %s\n", ready.Message)
	return nil
}

// ApprovePrune approves the prune a Sync holds (status.pendingPrune) by
// setting converge.dev/approve-prune to its revision.
func ApprovePrune(ctx context.Context, c client.Client, out io.Writer, key types.NamespacedName) error {
	sy := &gitopsv1alpha1.Sync{}
	if err := c.Get(ctx, key, sy); err != nil {
		return err
	}
	pp := sy.Status.PendingPrune
	if pp == nil {
		return errors.New("Sync " + key.String() + " holds no prune (status.pendingPrune is empty)")
	}
	p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ApprovePruneAnnotation, pp.Revision)
	if err := c.Patch(ctx, sy, client.RawPatch(types.MergePatchType, p), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("approving: %w", err)
	}
	fmt.Fprintf(out, "✔ approved pruning %d objects of revision %s\n", pp.Count, pp.Revision)
	for _, o := range pp.Objects {
		fmt.Fprintf(out, "  - %s %s/%s\n", o.Kind, o.Namespace, o.Name)
	}
	if int(pp.Count) > len(pp.Objects) {
		fmt.Fprintf(out, "  ... and %d more\n", int(pp.Count)-len(pp.Objects))
	}
	return nil
}
