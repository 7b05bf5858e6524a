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
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	g.Expect(err).NotTo(gomega.HaveOccurred())
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), u)).To(gomega.Succeed())
	res, err := kstatus.Compute(u)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(res.Status).To(gomega.Equal(want), "kstatus of %s %s: %s", gvk.Kind, client.ObjectKeyFromObject(obj), res.Message)
	if reason != "" {
		g.Expect(res.Conditions).To(gomega.ContainElement(gomega.HaveField("Reason", reason)), "kstatus conditions of %s %s", gvk.Kind, client.ObjectKeyFromObject(obj))
	}
	return res
}
