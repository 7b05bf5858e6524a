package lbagent_test

import (
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestUDPFlowsFollowEndpoints keeps one UDP socket talking to a VIP, as a
// resolver does: conntrack pins its flow to one backend. While that backend
// drains (terminating, still serving) the flow stays with it; once it
// stops being an endpoint, the agent deletes the flow's conntrack entry and
// the same socket's next packets reach the other backend. Without the
// sweep the socket would reach the removed backend for as long as it talks.
func TestUDPFlowsFollowEndpoints(t *testing.T) {
	testenv.Need(t, env)
	lbtest.NeedNetwork(t)
	g := NewWithT(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 1, 2)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(topo.Close)
	for i, be := range topo.Backends {
		g.Expect(topo.ServeHTTP(be, topo.BackendIPs[i].String()+":8080", be)).To(Succeed()) // the readiness probe's
		g.Expect(topo.ServeUDPEcho(be, topo.BackendIPs[i].String()+":5353", be)).To(Succeed())
	}
	ns := env.NewNamespace(t)
	startIPAM(t)
	newPool(t, "udp", ns, []string{"10.77.0.190-10.77.0.191"}, nil)
	newL2(t, "udp")
	_, err = topo.StartAgent(agentSpec(topo, 0, ns))
	g.Expect(err).NotTo(HaveOccurred())
	newService(t, ns, "dns", nil)
	both := []endpoint{{topo.BackendIPs[0].String(), true, false}, {topo.BackendIPs[1].String(), true, false}}
	setEndpoints(t, ns, "dns", both...)
	waitReason(t, ns, "dns", lbv1alpha1.ReachableReason)
	_, vip, _ := ready(ctx, ns, "dns")
	g.Expect(vip).NotTo(BeEmpty())

	var conn net.Conn
	g.Expect(netns.Do(topo.Client, func() (err error) { conn, err = net.Dial("udp", vip+":53"); return err })).To(Succeed())
	t.Cleanup(func() { _ = conn.Close() })
	ask := func() (string, error) {
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write([]byte("q")); err != nil {
			return "", err
		}
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		return strings.TrimSuffix(string(buf[:n]), ":q"), err
	}
	var first string
	g.Eventually(func() error { first, err = ask(); return err }).WithTimeout(20 * time.Second).Should(Succeed())
	pinned, other := 0, 1
	if first == topo.Backends[1] {
		pinned, other = 1, 0
	}
	g.Expect(first).To(Equal(topo.Backends[pinned]))
	for range 5 { // the flow is pinned: what makes the sweep necessary
		g.Expect(ask()).To(Equal(first))
	}

	// Draining: new flows avoid it, this one stays.
	eps := make([]endpoint, 2)
	eps[pinned] = endpoint{topo.BackendIPs[pinned].String(), false, true}
	eps[other] = both[other]
	setEndpoints(t, ns, "dns", eps...)
	g.Eventually(func() (string, error) {
		out, err := netns.Run(ctx, topo.Nodes[0], "nft", "list", "table", "ip", lbdataplane.Table)
		return string(out), err
	}).WithTimeout(20*time.Second).ShouldNot(ContainSubstring(topo.BackendIPs[pinned].String()+" . 5353"), "the rules still send to the draining endpoint")
	for range 6 {
		reply, err := lbtest.UDP(topo.Client, vip+":53", "q", time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(reply).To(Equal(topo.Backends[other] + ":q"))
	}
	// The agent's sweep follows its rules' change in the same pass; a
	// second is many passes.
	for range 5 {
		g.Expect(ask()).To(Equal(first), "a draining endpoint's flow was cut")
		time.Sleep(200 * time.Millisecond)
	}

	// No longer an endpoint (it failed its readiness, not terminating): the
	// same socket moves to the other backend.
	eps[pinned] = endpoint{topo.BackendIPs[pinned].String(), false, false}
	setEndpoints(t, ns, "dns", eps...)
	g.Eventually(ask).WithTimeout(20*time.Second).WithPolling(200*time.Millisecond).
		Should(Equal(topo.Backends[other]), "the socket still reaches the removed endpoint")
}
