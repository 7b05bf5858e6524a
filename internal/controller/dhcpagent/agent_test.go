package dhcpagent_test

import (
	"context"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/dhcp/dhcptest"
	"github.com/converge-dev/converge/internal/localcp"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

func pool(ns, name, network, prefix string, lease int32) *dhcpv1alpha1.IPPool {
	return &dhcpv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: dhcpv1alpha1.IPPoolSpec{NetworkName: network, IPv4Config: dhcpv1alpha1.IPv4Config{
			CIDR: prefix + ".0/24", ServerIP: prefix + ".2", Router: prefix + ".1",
			Pool: dhcpv1alpha1.AddressRange{Start: prefix + ".100", End: prefix + ".120"}, LeaseTime: lease,
			DNS: []string{prefix + ".53"}, DomainName: "agent.example", DomainSearch: []string{"agent.example"},
			NTP: []string{prefix + ".123"},
		}},
	}
}

func config(ns, name, network, mac string) *dhcpv1alpha1.MachineNetworkConfig {
	return &dhcpv1alpha1.MachineNetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: []dhcpv1alpha1.NetworkConfig{{NetworkName: network, MACAddress: mac}}},
	}
}

func agentReady(ctx context.Context, g Gomega, ns, name, reason string) *dhcpv1alpha1.IPPool {
	p := &dhcpv1alpha1.IPPool{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p)).To(Succeed())
	g.Expect(reconcile.Reason(p.Status.Conditions, dhcpv1alpha1.AgentReadyCondition)).To(Equal(reason))
	return p
}

// A real client on the network's bridge, in the namespace the agent made,
// gets the address the IPAM controller recorded, with the pool's options;
// then, with kube-apiserver stopped (SIGSTOP), it keeps renewing.
func TestAgentServesAndSurvivesAPIServerOutage(t *testing.T) {
	testenv.Need(t, env)
	testenv.NeedRoot(t, "DHCP agent test", "network namespaces")
	if _, err := exec.LookPath("udhcpc"); err != nil {
		testenv.NeedPeer(t, "DHCP agent test", "udhcpc is not installed")
	}
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	const mac = "02:00:00:00:0b:01"
	g.Expect(env.Client.Create(ctx, pool(ns, "lan", "agt1", "10.88.0", 10))).To(Succeed())
	g.Expect(env.Client.Create(ctx, config(ns, "vm1", "agt1", mac))).To(Succeed())
	var ip string
	testenv.Eventually(g, func(g Gomega) {
		m := &dhcpv1alpha1.MachineNetworkConfig{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "vm1"}, m)).To(Succeed())
		g.Expect(reconcile.IsTrue(m.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
		ip = m.Status.NetworkConfigs[0].AllocatedIPAddress
		p := agentReady(ctx, g, ns, "lan", dhcpv1alpha1.ServingReason)
		g.Expect(p.Status.Agent.Interface).To(Equal(qemu.BridgeName("agt1")))
		g.Expect(p.Status.Agent.Netns).To(Equal(machineNetns))
	}).Should(Succeed())

	nw := dhcptest.Existing(machineNetns, qemu.BridgeName("agt1"))
	t.Cleanup(nw.Close)
	cns, err := nw.AddClient(ctx, mac)
	g.Expect(err).NotTo(HaveOccurred())
	c, err := dhcptest.Udhcpc(ctx, cns, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Stop()
	ev, seen, err := c.WaitEvent(ctx, 0, 30*time.Second, "bound")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ev.Vars).To(HaveKeyWithValue("ip", ip))
	g.Expect(ev.Vars).To(HaveKeyWithValue("router", "10.88.0.1"))
	g.Expect(ev.Vars).To(HaveKeyWithValue("dns", "10.88.0.53"))
	g.Expect(ev.Vars).To(HaveKeyWithValue("domain", "agent.example"))
	g.Expect(ev.Vars).To(HaveKeyWithValue("lease", "10"))
	g.Expect(ev.Vars).To(HaveKeyWithValue("hostname", "vm1"))

	// The pool's router changes through the API; the next renewal has it.
	p := &dhcpv1alpha1.IPPool{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "lan"}, p)).To(Succeed())
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.IPv4Config.Router = "10.88.0.254"
	g.Expect(env.Client.Patch(ctx, p, patch)).To(Succeed())
	for {
		ev, seen, err = c.WaitEvent(ctx, seen, 30*time.Second, "renew")
		g.Expect(err).NotTo(HaveOccurred())
		if ev.Vars["router"] == "10.88.0.254" {
			break
		}
	}

	// The API server stops answering: renewals still succeed.
	pid := env.ControlPlane.Pids()[localcp.APIServer]
	g.Expect(pid).NotTo(BeZero())
	g.Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	for range 2 { // two renewals (every 5 s when on time) with the API server stopped
		ev, seen, err = c.WaitEvent(ctx, seen, 30*time.Second, "renew")
		g.Expect(err).NotTo(HaveOccurred(), "renewal while kube-apiserver (pid "+strconv.Itoa(pid)+") is stopped")
		g.Expect(ev.Vars).To(HaveKeyWithValue("ip", ip))
	}
	resume()
}

// Without a machine network namespace there is no agent, and the pool says
// so.
func TestAgentUnavailableWithoutNetns(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"dhcp-agent"}
		o.Machines.Netns = ""
		o.ShardKey = "nonetns"
	})
	p := pool(ns, "lan", "agt2", "10.89.0", 60)
	p.Labels = map[string]string{setup.ShardLabel: "nonetns"}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		p := agentReady(ctx, g, ns, "lan", dhcpv1alpha1.AgentUnavailableReason)
		g.Expect(reconcile.IsTrue(p.Status.Conditions, dhcpv1alpha1.AgentReadyCondition)).To(BeFalse())
	}).Should(Succeed())
}
