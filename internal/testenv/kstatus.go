package testenv

import (
	"context"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ExpectKstatus reads obj from the API server as unstructured and asserts
// that kstatus (sigs.k8s.io/cli-utils/pkg/kstatus, what a waiting Sync, Flux
// and kpt read) computes want for it, and, when reason is not empty, that
// the conditions it read carry reason. Call it inside Eventually.
func ExpectKstatus(ctx context.Context, g gomega.Gomega, c client.Client, obj client.Object, want kstatus.Status, reason string) *kstatus.Result {
	_, res, what := readKstatus(ctx, g, c, obj)
	g.Expect(res.Status).To(gomega.Equal(want), "kstatus of %s: %s", what, res.Message)
	if reason != "" {
		g.Expect(res.Conditions).To(gomega.ContainElement(gomega.HaveField("Reason", reason)), "kstatus conditions of %s", what)
	}
	return res
}

// readKstatus reads obj from the API server as unstructured (what kstatus
// reads) and computes its kstatus; what names the object in messages.
func readKstatus(ctx context.Context, g gomega.Gomega, c client.Client, obj client.Object) (u *unstructured.Unstructured, res *kstatus.Result, what string) {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	g.Expect(err).NotTo(gomega.HaveOccurred())
	u = &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), u)).To(gomega.Succeed())
	res, err = kstatus.Compute(u)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return u, res, gvk.Kind + " " + client.ObjectKeyFromObject(obj).String()
}

// ExpectKstatusAgrees reads obj from the API server and asserts that
// kstatus reads it as its own conditions mean it: being deleted is
// Terminating; Stalled=True is Failed with the Stalled reason; otherwise,
// with status.observedGeneration current, Ready=True is Current and any
// other Ready InProgress. A Converge kind that leaves a stale Reconciling
// or Stalled condition, or does not stamp observedGeneration, fails it.
// Call it inside Eventually, where a test already waits for a state.
func ExpectKstatusAgrees(ctx context.Context, g gomega.Gomega, c client.Client, obj client.Object) {
	u, res, what := readKstatus(ctx, g, c, obj)
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	state := func(typ string) (status, reason string) {
		for _, raw := range conds {
			m, _ := raw.(map[string]any)
			if m["type"] == typ {
				status, _ = m["status"].(string)
				reason, _ = m["reason"].(string)
			}
		}
		return status, reason
	}
	og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	stalled, stalledReason := state("Stalled")
	ready, readyReason := state("Ready")
	switch {
	case u.GetDeletionTimestamp() != nil:
		g.Expect(res.Status).To(gomega.Equal(kstatus.TerminatingStatus), "kstatus of %s being deleted: %s", what, res.Message)
	case stalled == "True":
		g.Expect(res.Status).To(gomega.Equal(kstatus.FailedStatus), "kstatus of Stalled (%s) %s: %s", stalledReason, what, res.Message)
		g.Expect(res.Conditions).To(gomega.ContainElement(gomega.HaveField("Reason", stalledReason)))
	case found && og != u.GetGeneration():
		g.Expect(res.Status).To(gomega.Equal(kstatus.InProgressStatus), "kstatus of %s, generation not observed: %s", what, res.Message)
	case ready == "True":
		g.Expect(res.Status).To(gomega.Equal(kstatus.CurrentStatus), "kstatus of Ready %s: %s", what, res.Message)
	case ready != "":
		g.Expect(res.Status).To(gomega.Equal(kstatus.InProgressStatus), "kstatus of %s, Ready %s (%s): %s", what, ready, readyReason, res.Message)
		g.Expect(res.Conditions).To(gomega.ContainElement(gomega.HaveField("Reason", readyReason)))
	}
}
