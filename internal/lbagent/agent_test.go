package lbagent_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestLoadBalancerEndToEnd drives real packets: two agents in two node
// namespaces, backends in their own namespaces, a client on the same
// bridge. It covers assignment, Ready only after a probe through the VIP,
// TCP spreading, UDP, drift correction, draining a terminating endpoint,
// failover after the owner dies, Unreachable and NoReadyEndpoints, and
// cleanup when the Service goes away.
func TestLoadBalancerEndToEnd(t *testing.T) {
	testenv.Need(t, env)
	lbtest.NeedNetwork(t)
	g := NewWithT(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 2, 2)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(topo.Close)
	for i, be := range topo.Backends {
		g.Expect(topo.ServeHTTP(be, topo.BackendIPs[i].String()+":8080", be)).To(Succeed())
		g.Expect(topo.ServeUDPEcho(be, topo.BackendIPs[i].String()+":5353", be)).To(Succeed())
	}
	ns := env.NewNamespace(t)
	startIPAM(t)
	newPool(t, "e2e", ns, []string{lbtest.PoolRange}, nil)
	newL2(t, "e2e")
	agents := make([]*lbtest.Agent, 2)
	for i := range agents {
		agents[i], err = topo.StartAgent(agentSpec(topo, i, ns))
		g.Expect(err).NotTo(HaveOccurred())
	}

	// No endpoints yet: assigned, announced, but not Ready and no ingress.
	newService(t, ns, "web", nil)
	c := waitReason(t, ns, "web", lbv1alpha1.NoReadyEndpointsReason)
	g.Expect(c.Status).To(Equal(metav1False))
	_, ip, _ := ready(ctx, ns, "web")
	g.Expect(ip).To(BeEmpty(), "ingress published before anything was reachable")

	setEndpoints(t, ns, "web", endpoint{topo.BackendIPs[0].String(), true, false}, endpoint{topo.BackendIPs[1].String(), true, false})
	c = waitReason(t, ns, "web", lbv1alpha1.ReachableReason)
	_, vip, _ := ready(ctx, ns, "web")
	g.Expect(vip).To(Equal(assignedAddress(ctx, "e2e", ns, "web")))
	owner := 0
	if strings.Contains(c.Message, "node node-b") {
		owner = 1
	}
	g.Expect(c.Message).To(ContainSubstring("announced by node node-"))

	seen := map[string]bool{}
	g.Eventually(func(g Gomega) {
		body, err := lbtest.Get(ctx, topo.Client, vip+":80", 2*time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		seen[body] = true
		g.Expect(seen).To(HaveLen(2))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	reply, err := lbtest.UDP(topo.Client, vip+":53", "hi", 2*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply).To(HaveSuffix(":hi"))

	// Someone deletes Converge's table on the owner: it comes back.
	_, err = netns.Run(ctx, topo.Nodes[owner], "nft", "delete", "table", "ip", lbdataplane.Table)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (string, error) {
		out, err := netns.Run(ctx, topo.Nodes[owner], "nft", "list", "table", "ip", lbdataplane.Table)
		return string(out), err
	}).WithTimeout(20 * time.Second).Should(ContainSubstring(vip))

	// Backend 1 terminates: new connections go to backend 0 only.
	setEndpoints(t, ns, "web", endpoint{topo.BackendIPs[0].String(), true, false}, endpoint{topo.BackendIPs[1].String(), false, true})
	g.Eventually(func(g Gomega) {
		for range 10 {
			body, err := lbtest.Get(ctx, topo.Client, vip+":80", 2*time.Second)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(body).To(Equal(topo.Backends[0]))
		}
	}).WithTimeout(20 * time.Second).Should(Succeed())
	setEndpoints(t, ns, "web", endpoint{topo.BackendIPs[0].String(), true, false}, endpoint{topo.BackendIPs[1].String(), true, false})

	// The owner dies (agent killed, cable pulled): the other node takes the
	// address's Lease, adds it and sends gratuitous ARP.
	agents[owner].Kill()
	_, err = netns.Run(ctx, topo.Nodes[owner], "ip", "link", "set", "eth0", "down")
	g.Expect(err).NotTo(HaveOccurred())
	killed := time.Now()
	g.Eventually(func() error {
		_, err := lbtest.Get(ctx, topo.Client, vip+":80", 500*time.Millisecond)
		return err
	}).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
	t.Logf("client-visible failover: %v (indicative only)", time.Since(killed))
	other := 1 - owner
	g.Eventually(func(g Gomega) {
		c, _, err := ready(ctx, ns, "web")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.Message).To(ContainSubstring("announced by node " + agentSpec(topo, other, ns).NodeName))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	announcedBy(t, ns, "web", "Node "+agentSpec(topo, other, ns).NodeName+" announces "+vip+" (taken over from node "+agentSpec(topo, owner, ns).NodeName+")")

	// Endpoints that accept nothing: Unreachable, with the address named.
	newService(t, ns, "dead", func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:1] })
	setEndpoints(t, ns, "dead", endpoint{topo.ClientIP.String(), true, false}) // nothing listens on the client
	c = waitReason(t, ns, "dead", lbv1alpha1.UnreachableReason)
	g.Expect(c.Message).To(ContainSubstring(":80"))

	// The Service goes away: address released, rules and ARP answers gone.
	svc := &corev1.Service{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, svc)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, svc)).To(Succeed())
	g.Eventually(func() string { return assignedAddress(ctx, "e2e", ns, "web") }).WithTimeout(30 * time.Second).Should(BeEmpty())
	g.Eventually(func() (string, error) {
		out, err := netns.Run(ctx, topo.Nodes[other], "nft", "list", "table", "ip", lbdataplane.Table)
		return string(out), err
	}).WithTimeout(20 * time.Second).ShouldNot(ContainSubstring(vip + " . tcp"))
	g.Eventually(func() (string, error) {
		out, err := netns.Run(ctx, topo.Nodes[other], "ip", "-o", "addr", "show", "dev", "lo")
		return string(out), err
	}).WithTimeout(20 * time.Second).ShouldNot(ContainSubstring(vip + "/32"))

	// A graceful stop removes the agent's table, addresses and Leases.
	agents[other].Stop()
	out, _ := netns.Run(ctx, topo.Nodes[other], "nft", "list", "tables")
	g.Expect(string(out)).NotTo(ContainSubstring(lbdataplane.Table))
	out, _ = netns.Run(ctx, topo.Nodes[other], "ip", "-o", "addr", "show", "dev", "lo")
	g.Expect(string(out)).NotTo(ContainSubstring(lbdataplane.Label))
	var leases coordinationList
	g.Expect(env.Client.List(ctx, &leases, client.InNamespace(ns))).To(Succeed())
	for _, l := range leases.Items {
		g.Expect(l.Spec.HolderIdentity).NotTo(HaveValue(Equal(agentSpec(topo, other, ns).NodeName)), l.Name)
	}
}

// TestStatusWritesNeverStarveTheHeartbeat: Lease writes have a budget of
// their own (the API server sees them from the Lease client). With both agents' status writes held to one every two
// seconds (longer than the 1.5 s lease duration), each still renews its
// heartbeat every renew interval, so neither takes over an address from
// a peer that is alive. On one shared budget the heartbeats wait behind
// status writes, each agent sees the other silent for a lease duration
// and the addresses move back and forth (and a real failover waits
// behind the same queue: the cause of a 1.6 → 3.6 s failover regression).
func TestStatusWritesNeverStarveTheHeartbeat(t *testing.T) {
	testenv.Need(t, env)
	lbtest.NeedNetwork(t)
	g := NewWithT(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 2, 1)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(topo.Close)
	g.Expect(topo.ServeHTTP(topo.Backends[0], topo.BackendIPs[0].String()+":8080", "be")).To(Succeed())
	ns := env.NewNamespace(t)
	startIPAM(t)
	newPool(t, "starved", ns, []string{"10.77.0.251-10.77.0.254"}, nil)
	newL2(t, "starved")
	for i := range 2 {
		spec := agentSpec(topo, i, ns)
		spec.KubeAPIQPS, spec.KubeAPIBurst = 0.5, 1
		_, err = topo.StartAgent(spec)
		g.Expect(err).NotTo(HaveOccurred())
	}
	names := []string{"web", "web2", "web3", "web4"}
	for _, name := range names {
		newService(t, ns, name, nil)
		setEndpoints(t, ns, name, endpoint{topo.BackendIPs[0].String(), true, false})
	}
	for _, name := range names {
		waitReason(t, ns, name, lbv1alpha1.ReachableReason)
	}
	transitions := func() map[string]int32 {
		var leases coordinationList
		g.Expect(env.Client.List(ctx, &leases, client.InNamespace(ns))).To(Succeed())
		m := map[string]int32{}
		for _, l := range leases.Items {
			if strings.HasPrefix(l.Name, "lb-vip-") {
				m[l.Name+" held by "+ptr.Deref(l.Spec.HolderIdentity, "")] = ptr.Deref(l.Spec.LeaseTransitions, 0)
			}
		}
		return m
	}
	before := transitions()
	g.Expect(before).To(HaveLen(len(names)))
	// Every Lease write went through the Lease client (its own budget):
	// the API server records its User-Agent as the writer.
	var leases coordinationList
	g.Expect(env.Client.List(ctx, &leases, client.InNamespace(ns))).To(Succeed())
	g.Expect(leases.Items).To(HaveLen(len(names) + 2)) // and two heartbeats
	for _, l := range leases.Items {
		g.Expect(l.ManagedFields).NotTo(BeEmpty(), l.Name)
		for _, mf := range l.ManagedFields {
			g.Expect(mf.Manager).To(Equal("converge-lbagent-leases"), "Lease %s written by another client", l.Name)
		}
	}
	// Three lease durations with both agents alive: no address changes hands.
	time.Sleep(4500 * time.Millisecond)
	g.Expect(transitions()).To(Equal(before), "an address moved between two live agents: a heartbeat was starved")
}
