package qemutest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/dhcpagent"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/qemu/netboottest"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// boot bounds one TCG network boot (3-7 s on 2 idle cores; more when the
// machine is shared).
const boot = 240 * time.Second

const network = "mupq"

// vms are the QemuMachines of the test, in upgrade (name) order.
var vms = []struct{ name, mac string }{{"q-0", "02:00:00:00:0f:01"}, {"q-1", "02:00:00:00:0f:02"}}

func nics(mac string) []qemu.NIC { return []qemu.NIC{{Name: "eth0", Network: network, MAC: mac}} }

// console is the serial console of the QemuMachine name of ns.
func console(ns, name string) string {
	b, _ := os.ReadFile(nb.Host().ConsoleLog(ns + "/" + name))
	return string(b)
}

// events lists "Reason: note" of the Events in ns about the object kind/name.
func events(g Gomega, t *testing.T, ns, kind, name string) []string {
	l, err := env.Clientset.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, e := range l.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			n := max(e.DeprecatedCount, 1)
			if e.Series != nil {
				n = e.Series.Count
			}
			for range n {
				out = append(out, e.Reason+": "+e.Note)
			}
		}
	}
	return out
}

func countPrefix(l []string, prefix string) int {
	n := 0
	for _, s := range l {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// qemuFleet makes, for each of vms, a QemuMachine and its Machine
// (label pool=q, image A, version 1.0, network boot, off), a MachineBMC
// publishing Redfish, on an IPPool with network boot; then powers them on
// one at a time and waits until each console shows image A booted over the
// network with its lease. Its cleanup deletes the Machines (they take
// their QemuMachines and VMs), waits until both are gone, and removes each
// VM and tap (if still there), also on failure.
func qemuFleet(t *testing.T, ns string) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	host := nb.Host()
	t.Cleanup(func() {
		cctx := context.WithoutCancel(ctx)
		for _, vm := range vms {
			_ = env.Client.Delete(cctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm.name}})
		}
		for _, vm := range vms {
			// The Machine goes once its QemuMachine (and VM) went; waiting
			// for both leaves no deletion in flight when the suite stops.
			key := types.NamespacedName{Namespace: ns, Name: vm.name}
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) && (env.Client.Get(cctx, key, &infrastructurev1alpha1.QemuMachine{}) == nil ||
				env.Client.Get(cctx, key, &machinev1alpha1.Machine{}) == nil) {
				time.Sleep(200 * time.Millisecond)
			}
			if err := host.Remove(cctx, ns+"/"+vm.name, nics(vm.mac)); err != nil {
				t.Errorf("removing VM %s/%s: %v", ns, vm.name, err)
			}
		}
	})
	pool := &dhcpv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lan"},
		Spec: dhcpv1alpha1.IPPoolSpec{NetworkName: network, IPv4Config: dhcpv1alpha1.IPv4Config{
			CIDR: "10.81.0.0/24", ServerIP: "10.81.0.2", Router: "10.81.0.1",
			Pool:      dhcpv1alpha1.AddressRange{Start: "10.81.0.100", End: "10.81.0.120"},
			LeaseTime: 600, NetworkBoot: true,
		}},
	}
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	for _, vm := range vms {
		qm := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm.name}}
		qm.Spec.PowerState = machinev1alpha1.PowerOff
		g.Expect(env.Client.Create(ctx, qm)).To(Succeed())
		m := &machinev1alpha1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm.name, Labels: map[string]string{"pool": "q", "name": vm.name}},
			Spec: machinev1alpha1.MachineSpec{
				InfrastructureRef: machinev1alpha1.InfrastructureReference{
					APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "QemuMachine", Name: vm.name,
				},
				Image: netboottest.ImageA, Version: "1.0", PowerState: machinev1alpha1.PowerOff, BootDevice: machinev1alpha1.BootNetwork,
				NetworkInterfaces: []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: network, MACAddress: vm.mac}},
			},
		}
		g.Expect(env.Client.Create(ctx, m)).To(Succeed())
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm.name + "-bmc"},
			Data: map[string][]byte{bmcv1alpha1.UsernameKey: []byte("admin"), bmcv1alpha1.PasswordKey: []byte("s3cret-bmc")}}
		g.Expect(env.Client.Create(ctx, sec)).To(Succeed())
		g.Expect(env.Client.Create(ctx, &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm.name},
			Spec: bmcv1alpha1.MachineBMCSpec{
				MachineRef:    bmcv1alpha1.LocalObjectReference{Name: vm.name},
				AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: vm.name + "-bmc"},
				Protocols:     []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish},
			}})).To(Succeed())
	}
	// Addresses allocated, the agent serving, the BMCs answering.
	ips := map[string]string{}
	testenv.Eventually(g, func(g Gomega) {
		for _, vm := range vms {
			c := &dhcpv1alpha1.MachineNetworkConfig{}
			g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: vm.name}, c)).To(Succeed())
			g.Expect(reconcile.IsTrue(c.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
			ips[vm.name] = c.Status.NetworkConfigs[0].AllocatedIPAddress
			b := &bmcv1alpha1.MachineBMC{}
			g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: vm.name}, b)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(b.Status.Conditions, bmcv1alpha1.ReadyCondition)).To(BeTrue())
		}
		p := &dhcpv1alpha1.IPPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), p)).To(Succeed())
		g.Expect(reconcile.Reason(p.Status.Conditions, dhcpv1alpha1.AgentReadyCondition)).To(Equal(dhcpv1alpha1.ServingReason))
	}).Should(Succeed())
	// One boot at a time (CPU).
	for _, vm := range vms {
		m := &machinev1alpha1.Machine{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: vm.name}, m)).To(Succeed())
		base := m.DeepCopy()
		m.Spec.PowerState = machinev1alpha1.PowerOn
		g.Expect(env.Client.Patch(ctx, m, client.MergeFrom(base))).To(Succeed())
		start := time.Now()
		lease := qemu.LeaseMarker + " eth0 " + ips[vm.name] + "/24"
		g.Eventually(func() string { return console(ns, vm.name) }).WithTimeout(boot).WithPolling(500*time.Millisecond).Should(
			And(ContainSubstring(qemu.InitMarker), ContainSubstring(lease)), "%s boots image A over the network", vm.name)
		t.Logf("%s: image A booted over the network, lease on the console %.1fs after power on", vm.name, time.Since(start).Seconds())
		g.Expect(console(ns, vm.name)).NotTo(ContainSubstring(qemu.ImageMarker), "image A prints no image marker")
	}
	testenv.Eventually(g, func(g Gomega) {
		for _, vm := range vms {
			m := &machinev1alpha1.Machine{}
			g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: vm.name}, m)).To(Succeed())
			g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
			g.Expect(m.Status.ConsoleLog).To(Equal(host.ConsoleLog(ns + "/" + vm.name)))
			g.Expect(events(g, t, ns, "Machine", vm.name)).To(ContainElement(dhcpagent.NetworkBootReason + ": served image " + netboottest.ImageA))
		}
	}).Should(Succeed())
}

func needQEMU(t *testing.T) {
	t.Helper()
	testenv.Need(t, env)
	testenv.NeedRoot(t, "MachineUpgrade QEMU test", "a network namespace, bridges and taps")
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.NeedPeer(t, "MachineUpgrade QEMU test", "qemu-system-x86_64 is not installed")
	}
	if err := nb.UpgradeImages(t.Context()); err != nil {
		testenv.NeedPeer(t, "MachineUpgrade QEMU test", "the test images: "+err.Error())
	}
}

func waitUpgrade(t *testing.T, u *upgradev1alpha1.MachineUpgrade, timeout time.Duration, check func(g Gomega, u *upgradev1alpha1.MachineUpgrade)) *upgradev1alpha1.MachineUpgrade {
	t.Helper()
	out := &upgradev1alpha1.MachineUpgrade{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), out)).To(Succeed())
		check(g, out)
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
	return out
}

func conditionMessage(u *upgradev1alpha1.MachineUpgrade, typ string) string {
	if c := meta.FindStatusCondition(u.Status.Conditions, typ); c != nil {
		return c.Message
	}
	return ""
}

// Two QemuMachines booted from image A over the network are upgraded to
// image B by a MachineUpgrade at maxUnavailable 1 with a console post-check
// expecting B's marker: each is power cycled once through its MachineBMC's
// Redfish endpoint, boots B over the network (the DHCP agent serves it),
// and shows B's marker on its console; the Machines are Upgraded one after
// the other, in order, and the upgrade Succeeded. Then an upgrade of q-0
// back to A with the same check waits for a marker A never prints and
// fails after its timeout, with the console's last line in the message.
func TestUpgradeQemuMachinesOverNetworkBoot(t *testing.T) {
	needQEMU(t)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	qemuFleet(t, ns)

	markerB := qemu.ImageMarker + " " + netboottest.ImageB
	u := &upgradev1alpha1.MachineUpgrade{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "to-b"},
		Spec: upgradev1alpha1.MachineUpgradeSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "q"}},
			Image:    netboottest.ImageB, Version: "2.0",
			Strategy:  upgradev1alpha1.UpgradeStrategy{MaxUnavailable: 1},
			PreChecks: []upgradev1alpha1.Check{{Name: "running", Expression: `machine.status.phase == "Running"`}},
			PostChecks: []upgradev1alpha1.Check{
				{Name: "running", Expression: `machine.status.phase == "Running"`},
				{Name: "booted-b", Console: "^" + markerB + "$"},
			},
			Timeouts: upgradev1alpha1.StepTimeouts{WaitForBoot: &metav1.Duration{Duration: boot}, Checks: &metav1.Duration{Duration: boot}},
		},
	}
	start := time.Now()
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, 2*boot+time.Minute, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded), "status %+v", u.Status)
	})
	t.Logf("upgrade of %d QemuMachines to %s Succeeded in %.1fs", len(vms), netboottest.ImageB, time.Since(start).Seconds())
	testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.ReadyCondition, metav1.ConditionTrue, upgradev1alpha1.SucceededReason)
	g.Expect(u.Status.Done).To(Equal("2/2"))
	g.Expect(u.Status.Machines).To(HaveLen(len(vms)))
	for i, mp := range u.Status.Machines {
		g.Expect(mp.Name).To(Equal(vms[i].name), "machines are in name order")
		g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineUpgraded))
		g.Expect(mp.Step).To(Equal(upgradev1alpha1.StepPostCheck))
		g.Expect(mp.StepState).To(Equal(upgradev1alpha1.StepStateSucceeded))
		g.Expect(mp.Attempts).To(BeEquivalentTo(1), "%s: the post-check waited for the console, it did not fail", mp.Name)
		g.Expect(mp.PreviousImage).To(Equal(netboottest.ImageA))
		g.Expect(mp.ConsoleOffset).NotTo(BeNil(), "%s: the console's place was recorded before the reset", mp.Name)
		g.Expect(mp.ConsoleDigest).To(HaveLen(64))
		if i > 0 {
			g.Expect(mp.Started.Time).NotTo(BeTemporally("<", u.Status.Machines[i-1].Finished.Time), "maxUnavailable 1: one after the other")
		}
	}
	for _, vm := range vms {
		m := &machinev1alpha1.Machine{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: vm.name}, m)).To(Succeed())
		g.Expect(m.Spec.Image).To(Equal(netboottest.ImageB))
		g.Expect(m.Spec.Version).To(Equal("2.0"))
		g.Expect(m.Status.PowerState).To(Equal(machinev1alpha1.PowerOn))
		c := console(ns, vm.name)
		g.Expect(c).To(ContainSubstring(markerB), "%s's console shows image B", vm.name)
		g.Expect(strings.Count(c, qemu.InitMarker)).To(Equal(1), "%s: one boot in this QEMU process (the one after the power cycle)", vm.name)
		g.Eventually(func(g Gomega) {
			ev := events(g, t, ns, "Machine", vm.name)
			g.Expect(countPrefix(ev, "BMCPower: Redfish ComputerSystem.Reset PowerCycle ")).To(Equal(1), "one Redfish power cycle of %s: %v", vm.name, ev)
			g.Expect(ev).To(ContainElement(dhcpagent.NetworkBootReason+": served image "+netboottest.ImageB), "%s booted B over the network", vm.name)
			g.Expect(countPrefix(events(g, t, ns, "MachineUpgrade", u.Name), "RedfishReset: Machine "+vm.name+": Redfish ComputerSystem.Reset PowerCycle sent")).To(Equal(1))
		}).WithTimeout(30 * time.Second).Should(Succeed())
	}

	// Back to A with the same check: A prints no marker, so the check
	// waits until its timeout and fails, saying what the console shows.
	back := &upgradev1alpha1.MachineUpgrade{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "back-to-a"},
		Spec: upgradev1alpha1.MachineUpgradeSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"name": vms[0].name}},
			Image:    netboottest.ImageA, Version: "1.0",
			Strategy:   upgradev1alpha1.UpgradeStrategy{MaxAttempts: 1},
			PostChecks: []upgradev1alpha1.Check{{Name: "booted-b", Console: "^" + markerB + "$"}},
			Timeouts:   upgradev1alpha1.StepTimeouts{WaitForBoot: &metav1.Duration{Duration: boot}, Checks: &metav1.Duration{Duration: time.Minute}},
		},
	}
	g.Eventually(func() error { return env.Client.Create(ctx, back) }).WithTimeout(30 * time.Second).Should(Succeed())
	back = waitUpgrade(t, back, boot+time.Minute, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.StalledCondition, metav1.ConditionTrue, upgradev1alpha1.StepFailedReason)
	})
	c := console(ns, vms[0].name)
	g.Expect(c).NotTo(ContainSubstring(markerB))
	mp := back.Status.Machine(vms[0].name)
	g.Expect(mp.Step).To(Equal(upgradev1alpha1.StepPostCheck))
	g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineFailed))
	want := fmt.Sprintf("timed out after 1m0s: console check booted-b: no line matching %q on the console of Machine %s since its power cycle (last line: ", "^"+markerB+"$", vms[0].name)
	g.Expect(mp.LastError).To(HavePrefix(want))
	last, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(mp.LastError, want), ")"))
	g.Expect(err).NotTo(HaveOccurred(), "the last line is quoted")
	g.Expect(last).NotTo(BeEmpty())
	g.Expect(c).To(ContainSubstring(last), "the last line is the console's")
	g.Expect(conditionMessage(back, upgradev1alpha1.StalledCondition)).To(Equal("Machine " + vms[0].name + ": step PostCheck failed 1 time(s): " + mp.LastError))
	g.Eventually(func() string { return console(ns, vms[0].name) }).WithTimeout(boot).Should(ContainSubstring(qemu.InitMarker), "A booted (over the network) and never printed B's marker")
	g.Expect(console(ns, vms[0].name)).NotTo(ContainSubstring(markerB))
}
