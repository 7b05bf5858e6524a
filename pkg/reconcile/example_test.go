package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// A condition is stamped with the generation it describes; setting it again
// to the same value reports no change, so a reconcile that changed nothing
// has nothing to write.
func ExampleMarkFalse() {
	var conds []metav1.Condition
	fmt.Println(reconcile.MarkFalse(&conds, 3, "Ready", "WaitingForSecret", "Secret db-admin not found"))
	fmt.Println(reconcile.MarkFalse(&conds, 3, "Ready", "WaitingForSecret", "Secret db-admin not found"))
	fmt.Println(reconcile.Reason(conds, "Ready"), conds[0].ObservedGeneration, reconcile.IsTrue(conds, "Ready"))
	// Output:
	// true
	// false
	// WaitingForSecret 3 false
}

// A kind whose terminal failure has a condition of its own mirrors it into
// Stalled, which kstatus (Flux, kpt, kubectl wait) reads as Failed; Stalled
// goes away when the failure does.
func ExampleMirrorStalled() {
	var conds []metav1.Condition
	reconcile.MarkTrue(&conds, 1, "Denied", "IssuerPolicyDenied", "name a.example.com is not allowed")
	reconcile.MirrorStalled(&conds, 1, "Denied")
	fmt.Println(reconcile.IsTrue(conds, reconcile.StalledCondition), reconcile.Reason(conds, reconcile.StalledCondition))
	reconcile.Remove(&conds, "Denied")
	reconcile.MirrorStalled(&conds, 1, "Denied")
	fmt.Println(reconcile.IsTrue(conds, reconcile.StalledCondition))
	// Output:
	// true IssuerPolicyDenied
	// false
}

// A message built from a remote system's text is bounded before it goes
// into a condition, and stays valid UTF-8.
func ExampleTruncate() {
	remote := strings.Repeat("é", 10) // 20 bytes
	fmt.Println(reconcile.Truncate(remote, 10))
	fmt.Println(reconcile.Truncate("short", reconcile.MaxMessageBytes))
	// Output:
	// ééé...
	// short
}

// The shape of a reconcile on the kit: read, take a patcher, defer the one
// status write, add the finalizer before any side effect. (Not run: it needs
// an API server; examples/kitchen is a complete controller built this way,
// tested on a real one.)
func ExampleStatusPatcher() {
	type reconciler struct{ client.Client }
	const finalizer = "example.converge.dev/cleanup"
	r := reconciler{}
	reconcileSync := func(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
		obj := &gitopsv1alpha1.Sync{}
		if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		patcher := reconcile.NewStatusPatcher(r.Client, obj)
		defer func() { err = errors.Join(err, patcher.Patch(ctx, obj)) }()
		if _, err := reconcile.EnsureFinalizer(ctx, r.Client, obj, finalizer); err != nil {
			return ctrl.Result{}, err
		}
		// ... drive the world towards obj.Spec ...
		reconcile.MarkTrue(&obj.Status.Conditions, obj.Generation, "Ready", "Succeeded", "applied")
		return ctrl.Result{}, nil
	}
	_ = reconcileSync
}
