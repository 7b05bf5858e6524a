package reconcile_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/converge-dev/converge/pkg/reconcile"
)

// TestMirrorStalled: what kstatus (the library a waiting Sync, Flux and
// kpt use) computes for a Converge status: it falls back to Ready (True is
// Current, False or Unknown InProgress with Ready's reason), Stalled is
// Failed, and a kind's own failure condition is Failed once MirrorStalled
// mirrored it, and Current again once it is lifted.
func TestMirrorStalled(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: reason + " message", ObservedGeneration: 3}
	}
	read := func(t *testing.T, conds []metav1.Condition) *kstatus.Result {
		t.Helper()
		raw := make([]any, 0, len(conds))
		for _, c := range conds {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
			if err != nil {
				t.Fatal(err)
			}
			raw = append(raw, m)
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.converge.dev/v1", "kind": "Thing",
			"metadata": map[string]any{"name": "t", "namespace": "ns", "generation": int64(3)},
			"status":   map[string]any{"observedGeneration": int64(3), "conditions": raw},
		}}
		res, err := kstatus.Compute(u)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, tc := range []struct {
		name   string
		conds  []metav1.Condition
		failed []string
		want   kstatus.Status
		reason string // of Reconciling or Stalled, when set
	}{
		{"ready", []metav1.Condition{cond("Ready", metav1.ConditionTrue, "Available")}, nil, kstatus.CurrentStatus, ""},
		{"working", []metav1.Condition{cond("Ready", metav1.ConditionFalse, "Provisioning")}, nil, kstatus.InProgressStatus, "Provisioning"},
		{"unknown", []metav1.Condition{cond("Ready", metav1.ConditionUnknown, "Checking")}, nil, kstatus.InProgressStatus, "Checking"},
		{"stalled", []metav1.Condition{cond("Ready", metav1.ConditionFalse, "PrivilegedRole"), cond("Stalled", metav1.ConditionTrue, "PrivilegedRole")}, nil, kstatus.FailedStatus, "PrivilegedRole"},
		{"own failure", []metav1.Condition{cond("Ready", metav1.ConditionFalse, "DumpFailed"), cond("Failed", metav1.ConditionTrue, "DumpFailed")}, []string{"Failed"}, kstatus.FailedStatus, "DumpFailed"},
		{"own failure lifted", []metav1.Condition{cond("Ready", metav1.ConditionTrue, "Completed"), cond("Failed", metav1.ConditionFalse, "Retried"), cond("Stalled", metav1.ConditionTrue, "DumpFailed")}, []string{"Failed"}, kstatus.CurrentStatus, ""},
		{"no ready", nil, nil, kstatus.CurrentStatus, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conds := append([]metav1.Condition(nil), tc.conds...)
			reconcile.MirrorStalled(&conds, 3, tc.failed...)
			res := read(t, conds)
			if res.Status != tc.want {
				t.Fatalf("kstatus %s (%s), want %s; conditions %+v", res.Status, res.Message, tc.want, conds)
			}
			if tc.reason != "" {
				found := false
				for _, c := range res.Conditions {
					found = found || c.Reason == tc.reason
				}
				if !found {
					t.Fatalf("kstatus conditions %+v do not carry reason %s", res.Conditions, tc.reason)
				}
			}
			if reconcile.MirrorStalled(&conds, 3, tc.failed...) {
				t.Fatalf("a second MirrorStalled changed %+v: it is not idempotent", conds)
			}
		})
	}
}
