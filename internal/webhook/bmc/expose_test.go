package bmc_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	webhookbmc "github.com/converge-dev/converge/internal/webhook/bmc"
)

// asAlice is a context carrying the admission request of user alice.
func asAlice() context.Context {
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"tenants"}}}})
}

// TestExposureFailsClosed: a NodePort or LoadBalancer BMC is admitted only
// when the requester's right to create Services was checked; when it
// cannot be (no admission request, or the SubjectAccessReview fails) the
// request is refused on spec.service.type, never let through. The
// allowed/denied answers themselves are asserted against a real API server
// by test/security TestMachineBMCCannotExposeWithoutServiceRights.
func TestExposureFailsClosed(t *testing.T) {
	g := NewWithT(t)
	for _, typ := range []bmcv1alpha1.ServiceType{bmcv1alpha1.ServiceNodePort, bmcv1alpha1.ServiceLoadBalancer} {
		b := machineBMC()
		b.Spec.Service.Type = typ
		_, err := webhookbmc.MachineBMC{}.ValidateCreate(context.Background(), b)
		g.Expect(err).To(MatchError(ContainSubstring("spec.service.type: Internal error")), "%s", typ)
		g.Expect(err).To(MatchError(ContainSubstring("no admission request to check the requester's rights")), "%s", typ)

		_, err = webhookbmc.MachineBMC{Client: testenv.UnreachableClient(t, authorizationv1.AddToScheme)}.ValidateCreate(asAlice(), b)
		g.Expect(err).To(MatchError(ContainSubstring("spec.service.type: Internal error")), "%s", typ)
		g.Expect(err).To(MatchError(ContainSubstring("checking whether alice may create Services in ns")), "%s", typ)
		g.Expect(err).To(MatchError(ContainSubstring("connection refused")), "%s", typ)
	}

	// ClusterIP needs no check: no request and no client are needed.
	b := machineBMC()
	b.Spec.Service.Type = bmcv1alpha1.ServiceClusterIP
	_, err := webhookbmc.MachineBMC{}.ValidateCreate(context.Background(), b)
	g.Expect(err).NotTo(HaveOccurred())

	// An update checks again only when the type changes.
	old := machineBMC()
	old.Spec.Service.Type = bmcv1alpha1.ServiceClusterIP
	cur := old.DeepCopy()
	cur.Spec.Service.Type = bmcv1alpha1.ServiceNodePort
	_, err = webhookbmc.MachineBMC{}.ValidateUpdate(context.Background(), old, cur)
	g.Expect(err).To(MatchError(ContainSubstring("no admission request to check the requester's rights")), "ClusterIP -> NodePort is checked")
	old = cur.DeepCopy()
	cur = old.DeepCopy()
	cur.Spec.AuthSecretRef.Name = "other"
	_, err = webhookbmc.MachineBMC{}.ValidateUpdate(context.Background(), old, cur)
	g.Expect(err).NotTo(HaveOccurred(), "a NodePort BMC that keeps its type is not checked again (stored rights are not re-asked)")
}
