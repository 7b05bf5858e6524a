package qemutest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	env      *testenv.Environment
	imageDir string
)

const wait = 180 * time.Second

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	imageDir, err = qemu.TestImageDir()
	if err == nil {
		err = qemu.BuildBusyboxImage(context.Background(), imageDir, "busybox")
	}
	if err == nil {
		_, err = exec.LookPath("qemu-system-x86_64")
	}
	if err == nil {
		_, err = exec.LookPath("ipmitool")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "MachineBMC QEMU tests: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING MachineBMC QEMU tests: %v ***\n\n", err)
		return 0
	}
	stateDir, err := os.MkdirTemp("", "cvbq")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(stateDir)
	defer (&qemu.Host{StateDir: stateDir}).StopAll()
	return testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"machine", "qemumachine", "machinebmc"}
		o.Machines = machineoptions.Machines{StateDir: stateDir, ImageDir: imageDir, PowerDownGrace: 500 * time.Millisecond}
	}}, &env)
}

func processGone(pid int) bool {
	if pid <= 0 {
		return true
	}
	err := syscall.Kill(pid, 0)
	if err != nil {
		return true
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return strings.Contains(string(b), ") Z ")
}

func consoleCount(path, marker string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), marker)
}

// ipmitool powers a real VM off (the QEMU process exits) and on again (a
// new QEMU process boots the image to init); bootdev pxe and a power cycle
// make it boot from the network.
func TestIpmitoolPowersAQemuVM(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()
	qm := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}}
	qm.Spec.Image = "busybox"
	g.Expect(env.Client.Create(ctx, qm)).To(Succeed())
	t.Cleanup(func() { // the VM goes with the object
		_ = env.Client.Delete(context.Background(), qm)
		NewWithT(t).Eventually(func() bool {
			return env.Client.Get(context.Background(), client.ObjectKeyFromObject(qm), qm) != nil
		}).WithTimeout(wait).Should(BeTrue())
	})
	m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"},
		Spec: machinev1alpha1.MachineSpec{Image: "busybox", NetworkInterfaces: []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: "lan"}}, InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "QemuMachine", Name: "vm"}}}
	g.Expect(env.Client.Create(ctx, m)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-bmc"},
		StringData: map[string]string{"username": "admin", "password": "s3cret-bmc"}})).To(Succeed())
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "vm"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "vm-bmc"},
		Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolIPMI}}}
	g.Expect(env.Client.Create(ctx, b)).To(Succeed())

	var console string
	var pid int32
	getQM := func(g Gomega) *infrastructurev1alpha1.QemuMachine {
		out := &infrastructurev1alpha1.QemuMachine{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "vm"}, out)).To(Succeed())
		return out
	}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(b.Status.Conditions, bmcv1alpha1.ReadyCondition)).To(BeTrue())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		console = m.Status.ConsoleLog
		g.Expect(consoleCount(console, qemu.InitMarker)).To(Equal(1))
		pid = getQM(g).Status.PID
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())

	h, p, err := net.SplitHostPort(b.Status.IPMIEndpoint)
	g.Expect(err).NotTo(HaveOccurred())
	ipmitool := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "ipmitool", append([]string{"-I", "lanplus", "-C", "17", "-H", h, "-p", p, "-U", "admin", "-P", "s3cret-bmc"}, args...)...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out)
	}
	g.Expect(ipmitool("power", "status")).To(ContainSubstring("Chassis Power is on"))

	ipmitool("power", "off")
	g.Eventually(func() bool { return processGone(int(pid)) }).WithTimeout(wait).Should(BeTrue(), "the QEMU process exited")
	g.Eventually(func(g Gomega) {
		g.Expect(ipmitool("power", "status")).To(ContainSubstring("Chassis Power is off"))
	}).WithTimeout(wait).Should(Succeed())

	ipmitool("power", "on")
	old := pid
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		pid = getQM(g).Status.PID
		g.Expect(pid).NotTo(Equal(old), "a new QEMU process")
		g.Expect(consoleCount(m.Status.ConsoleLog, qemu.InitMarker)).To(Equal(1), "booted again")
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(ipmitool("power", "status")).To(ContainSubstring("Chassis Power is on"))

	// bootdev pxe, then power cycle: the VM comes back through QEMU's
	// iPXE ROM (a network boot on the console).
	ipmitool("chassis", "bootdev", "pxe")
	ipmitool("power", "cycle")
	old = pid
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		pid = getQM(g).Status.PID
		g.Expect(pid).NotTo(Equal(old), "a new QEMU process")
		g.Expect(consoleCount(m.Status.ConsoleLog, "iPXE")).To(BeNumerically(">=", 1), "a network boot")
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// Redfish VirtualMedia InsertMedia names the image a Machine boots: a VM
// whose image does not exist boots once the inserted one is there.
func TestVirtualMediaBootsTheImage(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()
	qm := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}}
	qm.Spec.Image = "no-such-image"
	g.Expect(env.Client.Create(ctx, qm)).To(Succeed())
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), qm)
		NewWithT(t).Eventually(func() bool {
			return env.Client.Get(context.Background(), client.ObjectKeyFromObject(qm), qm) != nil
		}).WithTimeout(wait).Should(BeTrue())
	})
	m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"},
		Spec: machinev1alpha1.MachineSpec{Image: "no-such-image", InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "QemuMachine", Name: "vm"}}}
	g.Expect(env.Client.Create(ctx, m)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-bmc"},
		StringData: map[string]string{"username": "admin", "password": "s3cret-bmc"}})).To(Succeed())
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "vm"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "vm-bmc"},
		Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish}}}
	g.Expect(env.Client.Create(ctx, b)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(b.Status.Conditions, bmcv1alpha1.ReadyCondition)).To(BeTrue())
		cur := &infrastructurev1alpha1.QemuMachine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(qm), cur)).To(Succeed())
		c := meta.FindStatusCondition(cur.Status.Conditions, infrastructurev1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrastructurev1alpha1.ImageNotFoundReason))
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.Status.RedfishEndpoint+"/redfish/v1/Managers/BMC/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia",
		strings.NewReader(`{"Image":"http://images.example/busybox.iso","Inserted":true}`))
	g.Expect(err).NotTo(HaveOccurred())
	req.SetBasicAuth("admin", "s3cret-bmc")
	rsp, err := hc.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = rsp.Body.Close()
	g.Expect(rsp.StatusCode).To(Equal(http.StatusNoContent))
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Spec.Image).To(Equal("busybox"))
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		g.Expect(consoleCount(m.Status.ConsoleLog, qemu.InitMarker)).To(Equal(1), "booted the inserted image")
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
}
