package database

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestFailuresAreRetriedWithinAnInterval: however often a Database's
// reconcile failed, the next try is at most one observe interval away
// (controller-runtime's default would wait up to 1000 s), and the first
// retries stay fast.
func TestFailuresAreRetriedWithinAnInterval(t *testing.T) {
	rl := failureRateLimiter(10 * time.Second)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "db"}}
	if d := rl.When(req); d > 10*time.Millisecond {
		t.Fatalf("first retry after %v; want milliseconds", d)
	}
	var last time.Duration
	for range 30 {
		last = rl.When(req)
	}
	if last != 10*time.Second {
		t.Fatalf("retry after 31 failures: %v; want the 10s interval", last)
	}
	rl.Forget(req)
	if d := rl.When(req); d > 10*time.Millisecond {
		t.Fatalf("after a success the first retry waits %v", d)
	}
}
