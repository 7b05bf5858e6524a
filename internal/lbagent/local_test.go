package lbagent_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestExternalTrafficPolicyLocal: each backend sits behind one node (only
// that node routes to it, and its replies go through that node), as Pods
// do. A Service with externalTrafficPolicy Local is announced only by the
// node that has its ready endpoints, which sends to those alone and does
// not masquerade: the backend sees the client's own address. When the
// endpoint moves to the other node, so does the address. A Local Service
// whose endpoints name no node says it has no ready endpoint on a node.
func TestExternalTrafficPolicyLocal(t *testing.T) {
	testenv.Need(t, env)
	lbtest.NeedNetwork(t)
	g := NewWithT(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 2, 2)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(topo.Close)
	behind := make([]string, 2)
	for i, be := range topo.Backends {
		addr, err := topo.BehindNode(ctx, i, i)
		g.Expect(err).NotTo(HaveOccurred())
		behind[i] = addr.String()
		g.Expect(topo.ServeHTTPPeer(be, behind[i]+":8080")).To(Succeed())
	}
	ns := env.NewNamespace(t)
	startIPAM(t)
	newPool(t, "local", ns, []string{"10.77.0.180-10.77.0.181"}, nil)
	newL2(t, "local")
	for i := range 2 {
		_, err = topo.StartAgent(agentSpec(topo, i, ns))
		g.Expect(err).NotTo(HaveOccurred())
	}
	on := func(ip, node string) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
		if node != "" {
			e.NodeName = ptr.To(node)
		}
		return e
	}
	newService(t, ns, "web", func(s *corev1.Service) {
		s.Spec.Ports = s.Spec.Ports[:1]
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	// Behind node-b: without the policy node-a could announce it and could
	// not reach it at all.
	for _, step := range []struct{ be, node int }{{1, 1}, {0, 0}} {
		node := agentSpec(topo, step.node, ns).NodeName
		setSlice(t, ns, "web", []discoveryv1.Endpoint{on(behind[step.be], node)})
		g.Eventually(func(g Gomega) {
			c, _, err := ready(ctx, ns, "web")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.Reason).To(Equal(lbv1alpha1.ReachableReason), c.Message)
			g.Expect(c.Message).To(ContainSubstring("announced by node "+node+" (externalTrafficPolicy Local"), c.Message)
		}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		vip := assignedAddress(ctx, "local", ns, "web")
		g.Eventually(func(g Gomega) {
			for range 5 {
				peer, err := lbtest.Get(ctx, topo.Client, vip+":80", 2*time.Second)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(peer).To(Equal(topo.ClientIP.String()), "the backend saw %s, not the client: masqueraded", peer)
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
	}

	// Endpoints that name no node: nothing is local anywhere.
	setSlice(t, ns, "web", []discoveryv1.Endpoint{on(behind[0], "")})
	c := waitReason(t, ns, "web", lbv1alpha1.NoReadyEndpointsReason)
	g.Expect(c.Message).To(ContainSubstring("externalTrafficPolicy Local"))
}
