// Package gitopscli implements the gitops verbs of the converge CLI:
// `converge sync approve-prune NAME` and `converge diff sync NAME`
// (`converge reconcile` is internal/reconcilecli's, for every kind that
// honours the request). cmd/converge only parses flags.
package gitopscli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// FieldManager is the field manager of the CLI's writes.
const FieldManager = "converge-cli"

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
