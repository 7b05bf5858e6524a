package qemumachine_test

import (
	"context"
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

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/qemumachine"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
	"github.com/converge-dev/converge/pkg/contract/infrastructuremachine/conformance"
)

const wait = 180 * time.Second

func consoleCount(path, marker string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), marker)
}

func getQM(t *testing.T, g Gomega, ns, name string) *infrastructurev1alpha1.QemuMachine {
	qm := &infrastructurev1alpha1.QemuMachine{}
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, qm)).To(Succeed())
	return qm
}

func readyReason(qm *infrastructurev1alpha1.QemuMachine) string {
	if c := meta.FindStatusCondition(qm.Status.Conditions, infrastructurev1alpha1.ReadyCondition); c != nil {
		return c.Reason
	}
	return ""
}

// newQM makes a QemuMachine with one NIC, powered On by its own spec (as a
// QemuMachine used without a Machine must be).
func newQM(t *testing.T, ns, name, image string, labels map[string]string) *infrastructurev1alpha1.QemuMachine {
	return newQMPower(t, ns, name, image, labels, machinev1alpha1.PowerOn)
}

// newQMPower is newQM with spec.powerState given ("" leaves it to a Machine).
func newQMPower(t *testing.T, ns, name, image string, labels map[string]string, power machinev1alpha1.PowerState) *infrastructurev1alpha1.QemuMachine {
	qm := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	qm.Spec.Image = image
	qm.Spec.NetworkInterfaces = []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: "lan", MACAddress: "02:00:00:00:02:01"}}
	qm.Spec.PowerState = power
	NewWithT(t).Expect(env.Client.Create(t.Context(), qm)).To(Succeed())
	t.Cleanup(func() { // the VM goes with the object
		_ = env.Client.Delete(t.Context(), qm)
		NewWithT(t).Eventually(func() bool {
			return env.Client.Get(t.Context(), client.ObjectKeyFromObject(qm), qm) != nil
		}).WithTimeout(wait).Should(BeTrue())
	})
	return qm
}

// A Machine backed by a QemuMachine: the QemuMachine, made first and
// without a power state, starts nothing until its Machine takes it
// (WaitingForMachine: a VM started then would boot without its NICs); then
// a real VM boots (its console shows init), powers off (the QEMU process
// exits), powers on (boots again) and resets (boots again in the same
// process).
func TestQemuMachineLifecycle(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	newQMPower(t, ns, "vm", "busybox", nil, "")
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, ns, "vm")
		g.Expect(readyReason(qm)).To(Equal(infrastructurev1alpha1.WaitingForMachineReason))
		g.Expect(qm.Status.PID).To(BeZero())
		g.Expect(qm.Status.ObservedGeneration).To(Equal(qm.Generation))
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
	m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"},
		Spec: machinev1alpha1.MachineSpec{Image: "busybox", InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "QemuMachine", Name: "vm"}}}
	g.Expect(env.Client.Create(t.Context(), m)).To(Succeed())
	var console string
	var pid int32
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		g.Expect(m.Status.ProviderID).To(Equal("qemu://" + ns + "/vm"))
		console = m.Status.ConsoleLog
		g.Expect(consoleCount(console, qemu.InitMarker)).To(Equal(1))
		qm := getQM(t, g, ns, "vm")
		g.Expect(readyReason(qm)).To(Equal(infrastructurev1alpha1.PoweredOnReason))
		pid = qm.Status.PID
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())

	expectNodeClaimed(t, ns, m)

	setPower(t, m, machinev1alpha1.PowerOff)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhasePoweredOff))
		g.Expect(readyReason(getQM(t, g, ns, "vm"))).To(Equal(infrastructurev1alpha1.PoweredOffReason))
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Eventually(func() bool { return processGone(int(pid)) }).WithTimeout(10*time.Second).Should(BeTrue(), "the QEMU process exited")

	setPower(t, m, machinev1alpha1.PowerOn)
	old := pid
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		pid = getQM(t, g, ns, "vm").Status.PID
		g.Expect(pid).NotTo(Equal(old), "a new QEMU process")
		// A new QEMU starts a new console file.
		g.Expect(consoleCount(console, qemu.InitMarker)).To(Equal(1), "booted again")
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())

	qm := getQM(t, g, ns, "vm")
	patch := client.MergeFrom(qm.DeepCopy())
	qm.Annotations = map[string]string{qemumachine.ResetAnnotation: "1"}
	g.Expect(env.Client.Patch(t.Context(), qm, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, ns, "vm")
		g.Expect(qm.Status.LastResetToken).To(Equal("1"))
		g.Expect(qm.Status.PID).To(Equal(pid), "a reset keeps the process")
		g.Expect(consoleCount(console, qemu.InitMarker)).To(BeNumerically(">=", 2), "reset boots again in the same process")
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())

	// A guest whose CPUs stop while QEMU runs is not on: Ready=False,
	// Powering (the wanted state is On), power Off; it comes back when it runs.
	host := &qemu.Host{StateDir: stateDir}
	g.Expect(host.Pause(ns + "/vm")).To(Succeed())
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, ns, "vm")
		g.Expect(readyReason(qm)).To(Equal(infrastructurev1alpha1.PoweringReason))
		g.Expect(qm.Status.PowerState).To(Equal(machinev1alpha1.PowerOff))
		g.Expect(qm.Status.PID).To(Equal(pid), "the process is left alone")
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(host.Resume(ns + "/vm")).To(Succeed())
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, ns, "vm")
		g.Expect(readyReason(qm)).To(Equal(infrastructurev1alpha1.PoweredOnReason))
		g.Expect(qm.Status.PowerState).To(Equal(machinev1alpha1.PowerOn))
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// expectNodeClaimed registers the Nodes a kubelet would (the test image
// runs none): first a decoy with the QemuMachine's providerID under another
// name (a kubelet elsewhere may choose any providerID), then the guest's own
// Node, qemumachine.NodeName. The manager records the guest's as the
// QemuMachine's (provider-object annotation, tenant label and taint) and the
// Machine's status.nodeRef names it with its UID; the decoy is never
// claimed nor changed.
func expectNodeClaimed(t *testing.T, ns string, m *machinev1alpha1.Machine) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	qm := getQM(t, g, ns, m.Spec.InfrastructureRef.Name)
	register := func(name string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: machinespec.QemuProviderID(qm)}}
		g.Expect(env.Client.Create(ctx, n)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
		return n
	}
	decoy := register("decoy-" + ns)
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.NodeRef).To(BeNil(), "a Node found by providerID alone is never the Machine's")
	}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	own := register(qemumachine.NodeName(qm))
	g.Expect(own.Name).To(HavePrefix("qemu-" + ns + "-" + qm.Name + "-"))
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.NodeRef).NotTo(BeNil())
		g.Expect(m.Status.NodeRef.Name).To(Equal(own.Name))
		g.Expect(m.Status.NodeRef.UID).To(Equal(own.UID))
	}).WithTimeout(wait).WithPolling(200*time.Millisecond).Should(Succeed(), "the Machine claims its QemuMachine's Node")
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(own), node)).To(Succeed())
	g.Expect(node.Annotations).To(HaveKeyWithValue(contract.NodeOwnerAnnotation, ns+"/"+qm.Name+"/"+string(qm.UID)))
	g.Expect(node.Labels).To(HaveKeyWithValue(contract.TenantLabel, ns), "the Node names its tenant")
	g.Expect(node.Spec.Taints).To(ContainElement(contract.TenantTaint(ns)), "only the tenant's Pods land on it")
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(decoy), decoy)).To(Succeed())
	g.Expect(decoy.Annotations).NotTo(HaveKey(contract.NodeOwnerAnnotation), "the decoy is left alone")
	g.Expect(decoy.Labels).NotTo(HaveKey(contract.TenantLabel))
	g.Expect(decoy.Spec.Taints).NotTo(ContainElement(HaveField("Key", contract.TenantLabel)))
}

func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}

func setPower(t *testing.T, m *machinev1alpha1.Machine, p machinev1alpha1.PowerState) {
	t.Helper()
	cur := &machinev1alpha1.Machine{}
	g := NewWithT(t)
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), cur)).To(Succeed())
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.PowerState = p
	g.Expect(env.Client.Patch(t.Context(), cur, patch)).To(Succeed())
}

// A manager killed while a VM runs: the next one re-attaches to the same
// QEMU process, and the guest's uptime keeps counting (no second boot).
func TestManagerRestartAdoptsRunningVM(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	const shard = "qemu-restart"
	state, err := os.MkdirTemp("", "cvqr")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	// Runs last: whatever this test's managers left running is quit, even
	// when the manager that would delete the VM already stopped.
	t.Cleanup(func() { _ = (&qemu.Host{StateDir: state}).StopAll() })
	start := func() func() error {
		return env.StartManager(t, func(o *setup.Options) {
			o.Controllers, o.ShardKey = []string{"qemumachine"}, shard
			o.Machines = machineOptions(state)
		})
	}
	stop := start()
	qm := newQM(t, ns, "adopt", "busybox", map[string]string{setup.ShardLabel: shard})
	var console string
	var pid int32
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, ns, "adopt")
		g.Expect(readyReason(qm)).To(Equal(infrastructurev1alpha1.PoweredOnReason))
		console, pid = qm.Status.ConsoleLog, qm.Status.PID
		g.Expect(consoleCount(console, qemu.UptimeMarker)).To(BeNumerically(">=", 1))
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(stop()).To(Succeed())
	uptimes := consoleCount(console, qemu.UptimeMarker)

	start() // stopped by its own cleanup, before the QemuMachine's (LIFO); StopAll above quits the VM
	// Make the new manager look at it: a label change.
	cur := getQM(t, g, ns, "adopt")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Labels["touched"] = "yes"
	g.Expect(env.Client.Patch(t.Context(), cur, patch)).To(Succeed())
	g.Eventually(func() int { return consoleCount(console, qemu.UptimeMarker) }).WithTimeout(wait).Should(BeNumerically(">", uptimes+2), "the guest kept running")
	g.Expect(getQM(t, g, ns, "adopt").Status.PID).To(Equal(pid), "the same QEMU process")
	g.Expect(consoleCount(console, qemu.InitMarker)).To(Equal(1), "no second boot")
	_ = qm
}

// Failures a person must fix are reported with a reason.
func TestStartFailures(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	newQM(t, ns, "noimage", "no-such-image", nil)
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, ns, "noimage")
		g.Expect(readyReason(qm)).To(Equal(infrastructurev1alpha1.ImageNotFoundReason))
	}).WithTimeout(wait).Should(Succeed())

	const shard = "qemu-broken"
	state, err := os.MkdirTemp("", "cvqb")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	env.StartManager(t, func(o *setup.Options) {
		o.Controllers, o.ShardKey = []string{"qemumachine"}, shard
		o.Machines = machineOptions(state)
		o.Machines.QemuBinary = "/bin/false"
	})
	newQM(t, ns, "broken", "busybox", map[string]string{setup.ShardLabel: shard})
	g.Eventually(func(g Gomega) {
		g.Expect(readyReason(getQM(t, g, ns, "broken"))).To(Equal(infrastructurev1alpha1.StartFailedReason))
	}).WithTimeout(wait).Should(Succeed())
}

// A NIC whose bridge cannot be made is NetworkUnavailable: here a veth
// squats the bridge's name in the namespace, so the tap cannot join it.
func TestNetworkUnavailable(t *testing.T) {
	testenv.Need(t, env)
	testenv.NeedRoot(t, "QemuMachine network test", "bridges and taps")
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	netns := "cvqm-" + ns[len(ns)-6:]
	g.Expect(exec.Command("ip", "netns", "add", netns).Run()).To(Succeed())
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", netns).Run() })
	out, err := exec.Command("ip", "-n", netns, "link", "add", qemu.BridgeName("lan"), "type", "veth", "peer", "name", "cvp-lan").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	const shard = "qemu-net"
	state, err := os.MkdirTemp("", "cvqn")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	env.StartManager(t, func(o *setup.Options) {
		o.Controllers, o.ShardKey = []string{"qemumachine"}, shard
		o.Machines = machineOptions(state)
		o.Machines.Netns = netns
	})
	newQM(t, ns, "nonet", "busybox", map[string]string{setup.ShardLabel: shard})
	g.Eventually(func(g Gomega) {
		g.Expect(readyReason(getQM(t, g, ns, "nonet"))).To(Equal(infrastructurev1alpha1.NetworkUnavailableReason))
	}).WithTimeout(wait).Should(Succeed())
}

// QemuMachine passes the contract's conformance test.
func TestQemuMachineConformance(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	conformance.Run(t, conformance.Harness{
		Client: env.Client, Namespace: ns, GVK: infrastructurev1alpha1.GroupVersion.WithKind("QemuMachine"), Timeout: wait,
		Desired: contract.Desired{Image: "busybox"},
		New: func(t *testing.T, name string) {
			qm := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			qm.Spec.Image = "busybox"
			NewWithT(t).Expect(env.Client.Create(t.Context(), qm)).To(Succeed())
		},
	})
}

// A manager running VMs itself never touches a QemuMachine bound to a
// node (spec.nodeName): that node's machine agent runs it, and starting it
// here too would run two VMs. The unbound one beside it does run.
func TestManagerLeavesBoundQemuMachines(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	bound := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bound"}}
	bound.Spec.Image, bound.Spec.PowerState, bound.Spec.NodeName = "busybox", machinev1alpha1.PowerOn, "node-elsewhere"
	g.Expect(env.Client.Create(t.Context(), bound)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), bound) })
	newQM(t, ns, "unbound", "no-such-image", nil)
	g.Eventually(func(g Gomega) {
		g.Expect(readyReason(getQM(t, g, ns, "unbound"))).To(Equal(infrastructurev1alpha1.ImageNotFoundReason))
	}).WithTimeout(wait).Should(Succeed(), "the manager reconciles unbound QemuMachines")
	g.Consistently(func(g Gomega) {
		qm := getQM(t, g, ns, "bound")
		g.Expect(qm.Finalizers).To(BeEmpty())
		g.Expect(qm.Spec.ProviderID).To(BeEmpty())
		g.Expect(qm.Status.Conditions).To(BeEmpty())
	}).WithTimeout(3*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "the manager leaves a bound QemuMachine alone")
}
