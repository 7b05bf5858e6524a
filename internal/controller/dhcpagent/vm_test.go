package dhcpagent_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// A real VM (QEMU; TCG without /dev/kvm) whose NIC is a tap on the
// network's bridge, in the namespace the agent serves in (the one
// QemuMachine uses), gets the address its MachineNetworkConfig was
// allocated: the guest's udhcpc prints the lease on the console.
func TestVMGetsItsLease(t *testing.T) {
	testenv.Need(t, env)
	testenv.NeedRoot(t, "DHCP VM test", "bridges and taps")
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.NeedPeer(t, "DHCP VM test", "qemu-system-x86_64 is not installed")
	}
	g := NewWithT(t)
	ctx := t.Context()
	dir, err := qemu.TestImageDir()
	if err == nil {
		err = qemu.BuildBusyboxImage(ctx, dir, "busybox")
	}
	if err != nil {
		testenv.NeedPeer(t, "DHCP VM test", "the test image: "+err.Error())
	}
	ns := env.NewNamespace(t)
	const mac = "02:00:00:00:0c:01"
	g.Expect(env.Client.Create(ctx, pool(ns, "lan", "agtvm", "10.87.0", 60))).To(Succeed())
	g.Expect(env.Client.Create(ctx, config(ns, "vm", "agtvm", mac))).To(Succeed())
	var ip string
	testenv.Eventually(g, func(g Gomega) {
		m := &dhcpv1alpha1.MachineNetworkConfig{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "vm"}, m)).To(Succeed())
		g.Expect(reconcile.IsTrue(m.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
		ip = m.Status.NetworkConfigs[0].AllocatedIPAddress
		agentReady(ctx, g, ns, "lan", dhcpv1alpha1.ServingReason)
	}).Should(Succeed())

	state, err := os.MkdirTemp("", "cvq")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	h := &qemu.Host{StateDir: state, ImageDir: dir, Netns: machineNetns}
	id := ns + "/vm"
	nics := []qemu.NIC{{Name: "eth0", Network: "agtvm", MAC: mac}}
	t.Cleanup(func() {
		if err := h.Remove(context.WithoutCancel(ctx), id, nics); err != nil {
			t.Errorf("removing VM %s: %v", id, err)
		}
	})
	_, err = h.Start(ctx, qemu.Spec{ID: id, Image: "busybox", Boot: qemu.BootDisk, NICs: nics})
	g.Expect(err).NotTo(HaveOccurred())
	want := qemu.LeaseMarker + " eth0 " + ip + "/24"
	g.Eventually(func() string {
		b, _ := os.ReadFile(h.ConsoleLog(id))
		return string(b)
	}).WithTimeout(180*time.Second).WithPolling(500*time.Millisecond).Should(ContainSubstring(want), "the console shows the lease")
	b, _ := os.ReadFile(h.ConsoleLog(id))
	g.Expect(strings.Count(string(b), qemu.LeaseMarker)).To(BeNumerically(">=", 1))
}
