package testenv

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// StatusWrites sums kube-apiserver's apiserver_request_total over the PATCH
// and UPDATE (PUT) requests on the status subresource of resource (the
// plural, e.g. "databases"): every status write a client sent, also one that
// changed nothing. It counts every client of the control plane, so measure
// a window in which only the controller under test writes that status.
func (e *Environment) StatusWrites(t testing.TB, resource string) float64 {
	t.Helper()
	return e.requestTotal(t, func(l string) bool {
		return labelIn(l, "resource", []string{resource}) && labelIn(l, "subresource", []string{"status"}) &&
			labelIn(l, "verb", []string{"PATCH", "PUT", "UPDATE"})
	})
}

// Reconciles is how many reconciles the controller named controller (its
// controller-runtime name) has finished in this process's manager, whatever
// their result (controller_runtime_reconcile_total).
func Reconciles(t testing.TB, controller string) float64 {
	t.Helper()
	n, err := ReconcileCount(controller)
	if err != nil {
		t.Fatalf("reading the manager's metrics: %v", err)
	}
	return n
}

// ReconcileCount is [Reconciles] for code without a testing.TB (benchmarks
// running the manager in their own process).
func ReconcileCount(controller string) (float64, error) {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum, nil
}

// UnchangedReconciles makes the controller named controller reconcile obj,
// an object at rest, n times, each time by setting an annotation no
// controller reads (a metadata change, not a spec change), and waits for
// each reconcile to finish. It returns the status writes on resource (see
// [Environment.StatusWrites]) and the reconciles the controller finished
// meanwhile: a controller that writes an unchanged status only when it
// changed sends none.
func (e *Environment) UnchangedReconciles(t testing.TB, g gomega.Gomega, controller, resource string, obj client.Object, n int) (writes, reconciles float64) {
	t.Helper()
	writesBefore, recBefore := e.StatusWrites(t, resource), Reconciles(t, controller)
	for i := range n {
		before := Reconciles(t, controller)
		p := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.converge.dev/poke":%q}}}`, strconv.Itoa(i))
		g.Expect(e.Client.Patch(t.Context(), obj, client.RawPatch("application/merge-patch+json", p))).To(gomega.Succeed())
		Eventually(g, func(g gomega.Gomega) {
			g.Expect(Reconciles(t, controller)).To(gomega.BeNumerically(">", before))
		}).Should(gomega.Succeed())
	}
	// A reconcile that was already queued finishes too.
	time.Sleep(200 * time.Millisecond)
	return e.StatusWrites(t, resource) - writesBefore, Reconciles(t, controller) - recBefore
}
