package reconcile_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// syncWithInventory is a Sync as its controller reads it: n objects in its
// status inventory and its usual conditions.
func syncWithInventory(n int) *gitopsv1alpha1.Sync {
	sy := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "big", ResourceVersion: "42", Generation: 3}}
	for i := range n {
		sy.Status.Inventory = append(sy.Status.Inventory, gitopsv1alpha1.ObjectRef{
			Version: "v1", Kind: "ConfigMap", Namespace: "apps", Name: fmt.Sprintf("config-%05d", i)})
	}
	now := metav1.Now()
	for _, t := range []string{"Ready", "Healthy", "Reconciling", "PruneHeld"} {
		sy.Status.Conditions = append(sy.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue,
			Reason: "Succeeded", Message: "applied revision main@sha1:0123456789", LastTransitionTime: now, ObservedGeneration: 3})
	}
	sy.Status.ObservedGeneration = 3
	sy.Status.LastAppliedRevision = "main@sha1:0123456789"
	sy.Status.LastApplySummary = fmt.Sprintf("%d unchanged", n)
	return sy
}

// applied is what one applying reconcile changes: one more object in the
// inventory, a new revision, the Ready message.
func applied(sy *gitopsv1alpha1.Sync) *gitopsv1alpha1.Sync {
	out := sy.DeepCopy()
	out.Status.Inventory = append(out.Status.Inventory, gitopsv1alpha1.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "apps", Name: "config-new"})
	out.Status.LastAppliedRevision = "main@sha1:abcdef"
	out.Status.Conditions[0].Message = "applied revision main@sha1:abcdef"
	return out
}

// BenchmarkStatusPatch measures building the bytes of a status write of a
// Sync-shaped object (the CPU and memory a write costs the controller,
// without the API server): the kit's StatusPatcher against a typed
// client.MergeFrom of the same change.
func BenchmarkStatusPatch(b *testing.B) {
	scheme := runtime.NewScheme()
	if err := gitopsv1alpha1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1000, 10000} {
		read := syncWithInventory(n)
		after := applied(read)
		b.Run(fmt.Sprintf("kit/inventory=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				data, err := reconcile.StatusPatchData(scheme, read, after)
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			b.ReportMetric(float64(size), "patch-bytes")
		})
		b.Run(fmt.Sprintf("typed-mergefrom/inventory=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				base := read.DeepCopy()
				data, err := client.MergeFrom(base).Data(after)
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			b.ReportMetric(float64(size), "patch-bytes")
		})
	}
}
