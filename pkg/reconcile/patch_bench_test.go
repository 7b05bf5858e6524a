package reconcile_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	for _, n := range []int{1000, 10000} {
		read := syncWithInventory(n)
		after := applied(read)
		b.Run(fmt.Sprintf("kit/inventory=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				data, err := reconcile.StatusPatchData(read, after)
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

// TestStatusPatchData: the kit's first patch of a Sync-shaped change is
// locked on the resourceVersion read and carries the changed status fields
// and nothing else; an unchanged status sends nothing.
func TestStatusPatchData(t *testing.T) {
	read := syncWithInventory(3)
	after := applied(read)
	after.Status.LastApplySummary = ""
	data, err := reconcile.StatusPatchData(read, after)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	if err := json.Unmarshal([]byte(`{"metadata":{"resourceVersion":"42"},"status":{`+
		`"lastAppliedRevision":"main@sha1:abcdef","lastApplySummary":null,"inventory":[`+
		`{"version":"v1","kind":"ConfigMap","namespace":"apps","name":"config-00000"},`+
		`{"version":"v1","kind":"ConfigMap","namespace":"apps","name":"config-00001"},`+
		`{"version":"v1","kind":"ConfigMap","namespace":"apps","name":"config-00002"},`+
		`{"version":"v1","kind":"ConfigMap","namespace":"apps","name":"config-new"}],`+
		`"conditions":`+mustJSON(t, after.Status.Conditions)+`}}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("patch:\n%s\nwant:\n%v", data, want)
	}
	same, err := reconcile.StatusPatchData(read, read.DeepCopy())
	if err != nil || same != nil {
		t.Errorf("unchanged status: patch %s, %v; want none", same, err)
	}
	// A nested object is diffed, not replaced: only the field that changed.
	withDrift := read.DeepCopy()
	withDrift.Status.Drift = &gitopsv1alpha1.DriftStatus{Count: 1}
	moreDrift := withDrift.DeepCopy()
	moreDrift.Status.Drift.Count = 2
	data, err = reconcile.StatusPatchData(withDrift, moreDrift)
	if err != nil || string(data) != `{"metadata":{"resourceVersion":"42"},"status":{"drift":{"count":2}}}` {
		t.Errorf("nested change: patch %s, %v", data, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
