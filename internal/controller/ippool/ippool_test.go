package ippool_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/dhcp"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

func newPool(ns, name, network, cidr, start, end string) *dhcpv1alpha1.IPPool {
	pfx := netip.MustParsePrefix(cidr)
	return &dhcpv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: dhcpv1alpha1.IPPoolSpec{NetworkName: network, IPv4Config: dhcpv1alpha1.IPv4Config{
			CIDR: cidr, ServerIP: pfx.Addr().Next().Next().String(), Router: pfx.Addr().Next().String(),
			Pool: dhcpv1alpha1.AddressRange{Start: start, End: end}, LeaseTime: 60,
			DNS: []string{pfx.Addr().Next().String()}, DomainName: "lab.example",
		}},
	}
}

func mac(i int) string {
	return fmt.Sprintf("02:00:00:%02x:%02x:%02x", (i>>16)&0xff, (i>>8)&0xff, i&0xff)
}

func newMNC(ns, name, network string, i int, static string) *dhcpv1alpha1.MachineNetworkConfig {
	return &dhcpv1alpha1.MachineNetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: []dhcpv1alpha1.NetworkConfig{
			{NetworkName: network, MACAddress: mac(i), IPAddress: static},
		}},
	}
}

func getPool(ctx context.Context, g Gomega, ns, name string) *dhcpv1alpha1.IPPool {
	p := &dhcpv1alpha1.IPPool{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p)).To(Succeed())
	return p
}

func waitMNC(t *testing.T, ns, name string, check func(g Gomega, m *dhcpv1alpha1.MachineNetworkConfig)) *dhcpv1alpha1.MachineNetworkConfig {
	t.Helper()
	m := &dhcpv1alpha1.MachineNetworkConfig{}
	testenv.Eventually(NewWithT(t), func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, m)).To(Succeed())
		check(g, m)
		testenv.ExpectKstatusAgrees(t.Context(), g, env.Client, m)
	}).Should(Succeed())
	return m
}

func readyReason(g Gomega, conds []metav1.Condition, typ, reason string) {
	c := findCond(conds, typ)
	g.Expect(c).NotTo(BeNil(), "condition %s", typ)
	g.Expect(c.Reason).To(Equal(reason), "condition %s: %s", typ, c.Message)
}

func findCond(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// A static address is reserved and never handed out dynamically; dynamic
// configs take the rest; the pool then reports exhaustion naming itself,
// and a waiting config says which pool is full; deleting a config releases
// its address to the waiting one.
func TestStaticDynamicExhaustionRelease(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	g.Expect(env.Client.Create(ctx, newPool(ns, "lan", "lan", "10.20.0.0/24", "10.20.0.10", "10.20.0.12"))).To(Succeed())
	// The static address is the range's first: a dynamic config created
	// first must not get it either, once the static one is recorded.
	g.Expect(env.Client.Create(ctx, newMNC(ns, "static", "lan", 1, "10.20.0.10"))).To(Succeed())
	waitMNC(t, ns, "static", func(g Gomega, m *dhcpv1alpha1.MachineNetworkConfig) {
		readyReason(g, m.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.AllocatedReason)
		g.Expect(m.Status.NetworkConfigs[0].AllocatedIPAddress).To(Equal("10.20.0.10"))
		g.Expect(m.Status.NetworkConfigs[0].State).To(Equal(dhcpv1alpha1.StateAllocated))
	})
	testenv.Eventually(g, func(g Gomega) {
		testenv.ExpectKstatus(ctx, g, env.Client, getPool(ctx, g, ns, "lan"), kstatus.CurrentStatus, "")
	}).Should(Succeed())
	for i := 2; i <= 3; i++ {
		g.Expect(env.Client.Create(ctx, newMNC(ns, fmt.Sprintf("dyn%d", i), "lan", i, ""))).To(Succeed())
	}
	got := map[string]bool{}
	for i := 2; i <= 3; i++ {
		m := waitMNC(t, ns, fmt.Sprintf("dyn%d", i), func(g Gomega, m *dhcpv1alpha1.MachineNetworkConfig) {
			readyReason(g, m.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.AllocatedReason)
		})
		ip := m.Status.NetworkConfigs[0].AllocatedIPAddress
		g.Expect(ip).NotTo(Equal("10.20.0.10"), "the static address went to a dynamic client")
		got[ip] = true
	}
	g.Expect(got).To(HaveLen(2))

	// Full: the next one waits, naming the pool; the pool says Exhausted.
	g.Expect(env.Client.Create(ctx, newMNC(ns, "late", "lan", 4, ""))).To(Succeed())
	waitMNC(t, ns, "late", func(g Gomega, m *dhcpv1alpha1.MachineNetworkConfig) {
		readyReason(g, m.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.PoolExhaustedReason)
		g.Expect(findCond(m.Status.Conditions, dhcpv1alpha1.ReadyCondition).Message).To(ContainSubstring(ns + "/lan"))
		g.Expect(m.Status.NetworkConfigs[0].State).To(Equal(dhcpv1alpha1.StatePending))
	})
	testenv.Eventually(g, func(g Gomega) {
		p := getPool(ctx, g, ns, "lan")
		readyReason(g, p.Status.Conditions, dhcpv1alpha1.ExhaustedCondition, dhcpv1alpha1.PoolExhaustedReason)
		g.Expect(findCond(p.Status.Conditions, dhcpv1alpha1.ExhaustedCondition).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(findCond(p.Status.Conditions, dhcpv1alpha1.ExhaustedCondition).Message).To(ContainSubstring(ns + "/lan"))
		readyReason(g, p.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.PoolExhaustedReason)
		// Ready=False: kstatus reads the exhausted pool InProgress (until
		// an address is released).
		testenv.ExpectKstatus(ctx, g, env.Client, p, kstatus.InProgressStatus, dhcpv1alpha1.PoolExhaustedReason)
		g.Expect(p.Status.IPv4.Used).To(Equal(int32(3)))
		g.Expect(p.Status.IPv4.Available).To(Equal(int32(0)))
		// The same counts as metrics (the manager runs in this process).
		g.Expect(testutil.ToFloat64(dhcp.PoolUsed.WithLabelValues(ns, "lan", "lan"))).To(Equal(3.0))
		g.Expect(testutil.ToFloat64(dhcp.PoolAvailable.WithLabelValues(ns, "lan", "lan"))).To(Equal(0.0))
	}).Should(Succeed())

	// Another static claim of a held address is refused, naming the holder.
	g.Expect(env.Client.Create(ctx, newMNC(ns, "thief", "lan", 5, "10.20.0.10"))).To(Succeed())
	waitMNC(t, ns, "thief", func(g Gomega, m *dhcpv1alpha1.MachineNetworkConfig) {
		readyReason(g, m.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.AddressUnavailableReason)
		g.Expect(findCond(m.Status.Conditions, dhcpv1alpha1.ReadyCondition).Message).To(ContainSubstring(mac(1)))
	})
	g.Expect(env.Client.Delete(ctx, newMNC(ns, "thief", "lan", 5, ""))).To(Succeed())

	// Releasing one address lets the waiting config have it.
	g.Expect(env.Client.Delete(ctx, newMNC(ns, "dyn2", "lan", 2, ""))).To(Succeed())
	waitMNC(t, ns, "late", func(g Gomega, m *dhcpv1alpha1.MachineNetworkConfig) {
		readyReason(g, m.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.AllocatedReason)
	})
	testenv.Eventually(g, func(g Gomega) {
		p := getPool(ctx, g, ns, "lan")
		readyReason(g, p.Status.Conditions, dhcpv1alpha1.ExhaustedCondition, dhcpv1alpha1.PoolExhaustedReason)
		g.Expect(p.Status.IPv4.Allocated).To(HaveLen(3))
		for _, a := range p.Status.IPv4.Allocated {
			g.Expect(a.Owner).NotTo(Equal("dyn2"))
		}
	}).Should(Succeed())
}

// A config whose network has no pool in its namespace waits (a pool of
// another namespace is never used); a paused pool gives nothing new.
func TestPoolNotFoundAndPaused(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns, other := env.NewNamespace(t), env.NewNamespace(t)
	g.Expect(env.Client.Create(ctx, newPool(other, "wan", "wan", "10.21.0.0/24", "10.21.0.10", "10.21.0.20"))).To(Succeed())
	g.Expect(env.Client.Create(ctx, newMNC(ns, "m", "wan", 1, ""))).To(Succeed())
	waitMNC(t, ns, "m", func(g Gomega, m *dhcpv1alpha1.MachineNetworkConfig) {
		readyReason(g, m.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.PoolNotFoundReason)
	})
	p := newPool(ns, "wan2", "wan2", "10.22.0.0/24", "10.22.0.10", "10.22.0.20")
	p.Spec.Paused = true
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Expect(env.Client.Create(ctx, newMNC(ns, "p", "wan2", 2, ""))).To(Succeed())
	waitMNC(t, ns, "p", func(g Gomega, m *dhcpv1alpha1.MachineNetworkConfig) {
		readyReason(g, m.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.PausedReason)
	})
	testenv.Eventually(g, func(g Gomega) {
		p := getPool(ctx, g, ns, "wan2")
		readyReason(g, p.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.PausedReason)
		readyReason(g, p.Status.Conditions, dhcpv1alpha1.ExhaustedCondition, dhcpv1alpha1.AddressesAvailableReason)
	}).Should(Succeed())
}

// A Machine with NICs gets a MachineNetworkConfig it owns, with its MACs;
// a static address set on it by hand survives; deleting the Machine
// deletes the config and releases the address.
func TestMachineGetsAConfig(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	g.Expect(env.Client.Create(ctx, newPool(ns, "lan", "lan", "10.23.0.0/24", "10.23.0.10", "10.23.0.20"))).To(Succeed())
	m := &machinev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1"},
		Spec: machinev1alpha1.MachineSpec{
			InfrastructureRef: machinev1alpha1.InfrastructureReference{APIVersion: "infrastructure.converge.dev/v1alpha1", Kind: "KwokMachine", Name: "vm1"},
			NetworkInterfaces: []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: "lan"}},
		},
	}
	g.Expect(env.Client.Create(ctx, m)).To(Succeed())
	mnc := waitMNC(t, ns, "vm1", func(g Gomega, c *dhcpv1alpha1.MachineNetworkConfig) {
		readyReason(g, c.Status.Conditions, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.AllocatedReason)
	})
	g.Expect(metav1.IsControlledBy(mnc, m)).To(BeTrue())
	g.Expect(mnc.Spec.NetworkConfigs[0].MACAddress).To(Equal(m.Spec.NetworkInterfaces[0].MACAddress))

	// A static address set on the generated config is kept.
	patch := client.MergeFrom(mnc.DeepCopy())
	mnc.Spec.NetworkConfigs[0].IPAddress = "10.23.0.99"
	g.Expect(env.Client.Patch(ctx, mnc, patch)).To(Succeed())
	waitMNC(t, ns, "vm1", func(g Gomega, c *dhcpv1alpha1.MachineNetworkConfig) {
		g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
		g.Expect(c.Status.NetworkConfigs[0].AllocatedIPAddress).To(Equal("10.23.0.99"))
	})
	g.Expect(env.Client.Delete(ctx, m)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		p := getPool(ctx, g, ns, "lan")
		g.Expect(p.Status.IPv4.Allocated).To(BeEmpty())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(mnc), &dhcpv1alpha1.MachineNetworkConfig{})).NotTo(Succeed())
	}).Should(Succeed())
}

// 200 configs created at once, allocated by two managers at the same time
// (no leader election: both write), one of them restarted midway, never
// share an address; every allocation names its owner.
func TestTwoHundredRacingNeverShare(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	g.Expect(env.Client.Create(ctx, newPool(ns, "lan", "lan", "10.24.0.0/16", "10.24.1.1", "10.24.1.250"))).To(Succeed())
	second := func() func() error {
		return env.StartManager(t, func(o *setup.Options) { o.Controllers = []string{"ippool"} })
	}
	stop := second()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := env.Client.Create(ctx, newMNC(ns, fmt.Sprintf("m%03d", i), "lan", 1000+i, "")); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	g.Expect(stop()).To(Succeed())
	second()
	g.Eventually(func(g Gomega) {
		var list dhcpv1alpha1.MachineNetworkConfigList
		g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		ready := 0
		for i := range list.Items {
			if reconcile.IsTrue(list.Items[i].Status.Conditions, dhcpv1alpha1.ReadyCondition) {
				ready++
			}
		}
		g.Expect(ready).To(Equal(n))
	}).WithTimeout(5 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed()) // a window, not a speed: 141 s at load 14, 188 of 200 at 181 s beside make bench

	p := getPool(ctx, g, ns, "lan")
	g.Expect(p.Status.IPv4.Allocated).To(HaveLen(n))
	byIP, byMAC := map[string]string{}, map[string]string{}
	for _, a := range p.Status.IPv4.Allocated {
		g.Expect(byIP).NotTo(HaveKey(a.IP), "address %s given twice", a.IP)
		byIP[a.IP], byMAC[a.MACAddress] = a.Owner, a.IP
	}
	var list dhcpv1alpha1.MachineNetworkConfigList
	g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	seen := map[string]string{}
	for _, m := range list.Items {
		ip := m.Status.NetworkConfigs[0].AllocatedIPAddress
		g.Expect(seen).NotTo(HaveKey(ip), "%s and %s both report %s", seen[ip], m.Name, ip)
		seen[ip] = m.Name
		g.Expect(byIP[ip]).To(Equal(m.Name), "the pool records %s for %s", ip, m.Name)
		g.Expect(byMAC[m.Spec.NetworkConfigs[0].MACAddress]).To(Equal(ip))
	}
	g.Expect(p.Status.IPv4.Used).To(Equal(int32(n)))
	g.Expect(p.Status.IPv4.Available).To(Equal(int32(250 - n)))
	if testing.Verbose() {
		t.Logf("200 allocations, first %s, last %s", p.Status.IPv4.Allocated[0].IP, p.Status.IPv4.Allocated[n-1].IP)
	}
}

// Bad pools are refused at admission naming the field; a pool overlapping
// another pool of the same network is refused even from another namespace,
// while a pool of another network may reuse the subnet.
func TestAdmissionRefusesBadPools(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns, other := env.NewNamespace(t), env.NewNamespace(t)
	for field, mut := range map[string]func(p *dhcpv1alpha1.IPPool){
		"spec.ipv4Config.pool.start": func(p *dhcpv1alpha1.IPPool) { p.Spec.IPv4Config.Pool.Start = "10.99.0.10" },
		"spec.ipv4Config.serverIP":   func(p *dhcpv1alpha1.IPPool) { p.Spec.IPv4Config.ServerIP = "10.25.0.15" },
		"spec.ipv4Config.router":     func(p *dhcpv1alpha1.IPPool) { p.Spec.IPv4Config.Router = "10.99.0.1" },
		"spec.ipv4Config.dns": func(p *dhcpv1alpha1.IPPool) {
			p.Spec.IPv4Config.DNS = []string{"10.25.0.1", "10.25.0.3", "10.25.0.4", "10.25.0.5"}
		},
	} {
		p := newPool(ns, "bad", "adm", "10.25.0.0/24", "10.25.0.10", "10.25.0.20")
		mut(p)
		err := env.Client.Create(ctx, p)
		g.Expect(err).To(HaveOccurred(), field)
		g.Expect(err.Error()).To(ContainSubstring(field))
	}
	g.Expect(env.Client.Create(ctx, newPool(ns, "a", "adm", "10.25.0.0/24", "10.25.0.10", "10.25.0.20"))).To(Succeed())
	err := env.Client.Create(ctx, newPool(other, "b", "adm", "10.25.0.0/25", "10.25.0.30", "10.25.0.40"))
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(ContainSubstring("spec.ipv4Config.cidr"), ContainSubstring(ns+"/a")))
	g.Expect(env.Client.Create(ctx, newPool(other, "c", "adm2", "10.25.0.0/24", "10.25.0.10", "10.25.0.20"))).To(Succeed())
}
