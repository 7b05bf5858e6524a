package lbagent_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestUserspaceLocalMode is the local mode of `converge up`: the agent with
// the userspace data plane on a loopback pool, on one "host" (a node
// namespace, so the test's own host is untouched), and a client on that
// same host. No nftables table, no address added: the proxy listens on the
// loopback address. The Service is Ready only once a connection through it
// reached the backend; TCP and UDP reach it; an endpoint that refuses is
// Unreachable; the Service deleted, nothing listens any more.
func TestUserspaceLocalMode(t *testing.T) {
	testenv.Need(t, env)
	lbtest.NeedNetwork(t)
	g := NewWithT(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 1, 1)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(topo.Close)
	host := topo.Nodes[0]
	_, err = netns.Run(ctx, host, "ip", "link", "set", "lo", "up")
	g.Expect(err).NotTo(HaveOccurred())
	be := topo.BackendIPs[0].String()
	g.Expect(topo.ServeHTTP(topo.Backends[0], be+":8080", "be")).To(Succeed())
	g.Expect(topo.ServeUDPEcho(topo.Backends[0], be+":5353", "be")).To(Succeed())
	ns := env.NewNamespace(t)
	startIPAM(t)
	newPool(t, "loopback", ns, []string{"127.240.0.10-127.240.0.11"}, nil)
	newL2(t, "loopback")
	spec := agentSpec(topo, 0, ns)
	spec.Userspace = true
	_, err = topo.StartAgent(spec)
	g.Expect(err).NotTo(HaveOccurred())

	// Unprivileged ports: the proxy binds what a user may bind.
	newService(t, ns, "web", func(s *corev1.Service) {
		s.Spec.Ports[0].Port, s.Spec.Ports[1].Port = 8000, 8053
	})
	waitReason(t, ns, "web", lbv1alpha1.NoReadyEndpointsReason)
	setEndpoints(t, ns, "web", endpoint{be, true, false})
	c := waitReason(t, ns, "web", lbv1alpha1.ReachableReason)
	g.Expect(c.Message).To(ContainSubstring("announced by node " + spec.NodeName))
	_, vip, _ := ready(ctx, ns, "web")
	g.Expect(vip).To(HavePrefix("127.240.0."))
	body, err := lbtest.Get(ctx, host, vip+":8000", 2*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(body).To(Equal("be"))
	reply, err := lbtest.UDP(host, vip+":8053", "hi", 2*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply).To(Equal("be:hi"))
	out, _ := netns.Run(ctx, host, "nft", "list", "tables")
	g.Expect(string(out)).NotTo(ContainSubstring(lbdataplane.Table), "the userspace mode programmed nftables")

	// The endpoint stops accepting (nothing listens on the client's
	// address): Unreachable, although the proxy itself accepts.
	setEndpoints(t, ns, "web", endpoint{topo.ClientIP.String(), true, false})
	c = waitReason(t, ns, "web", lbv1alpha1.UnreachableReason)
	g.Expect(c.Message).To(ContainSubstring(":8000"))

	svc := &corev1.Service{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, svc)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, svc)).To(Succeed())
	g.Eventually(func() error {
		_, err := lbtest.Get(ctx, host, vip+":8000", 500*time.Millisecond)
		return err
	}).WithTimeout(20 * time.Second).Should(MatchError(ContainSubstring("refused")))
}
