package dhcpagent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/dhcpagent"
	"github.com/converge-dev/converge/internal/dhcp"
	"github.com/converge-dev/converge/internal/dhcp/dhcptest"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

func bootPool(ns, name, network, prefix string) *dhcpv1alpha1.IPPool {
	p := pool(ns, name, network, prefix, 60)
	p.Spec.IPv4Config.NetworkBoot = true
	return p
}

func machine(ns, name, network, mac, image string, power machinev1alpha1.PowerState) *machinev1alpha1.Machine {
	return &machinev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: machinev1alpha1.MachineSpec{
			InfrastructureRef: machinev1alpha1.InfrastructureReference{
				APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "QemuMachine", Name: name,
			},
			Image: image, PowerState: power, BootDevice: machinev1alpha1.BootNetwork,
			NetworkInterfaces: []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: network, MACAddress: mac}},
		},
	}
}

// allocated waits for the config's address.
func allocated(ctx context.Context, g Gomega, ns, name string) string {
	var ip string
	testenv.Eventually(g, func(g Gomega) {
		m := &dhcpv1alpha1.MachineNetworkConfig{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, m)).To(Succeed())
		g.Expect(reconcile.IsTrue(m.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
		ip = m.Status.NetworkConfigs[0].AllocatedIPAddress
	}).Should(Succeed())
	return ip
}

// netnsGet GETs url from inside the network namespace ns (the connection
// is made there), returning the status code and body.
func netnsGet(ctx context.Context, ns, url string) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := netns.Do(ns, func() (err error) {
				conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// netbootCount is converge_netboot_requests_total{file,code} of this
// process (the suite's manager runs in it).
func netbootCount(g Gomega, file, code string) float64 {
	mfs, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, mf := range mfs {
		if mf.GetName() != "converge_netboot_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "file") == file && label(m, "code") == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// bootEvents are the notes of the NetworkBoot Events of a Machine.
func bootEvents(ctx context.Context, g Gomega, ns, name string) []string {
	var list eventsv1.EventList
	g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Machine" && e.Regarding.Name == name && e.Reason == dhcpagent.NetworkBootReason {
			out = append(out, e.Note)
		}
	}
	return out
}

// The boot server of a pool with networkBoot, reached from a client on
// the network's bridge holding the leased address: the script names the
// image of the Machine of the pool's namespace that has the MAC (looked up
// through the API server's objects), with an Event on it; a MAC whose
// Machine is in another namespace (its config in the pool's namespace was
// made by hand) is 404, and so are another client's script and an image
// that is not the caller's Machine's.
func TestNetBootServesOnlyThePoolsNamespace(t *testing.T) {
	testenv.Need(t, env)
	testenv.NeedRoot(t, "network boot test", "network namespaces")
	g := NewWithT(t)
	ctx := t.Context()
	ns, other := env.NewNamespace(t), env.NewNamespace(t)
	const mine, theirs = "02:00:00:00:0d:01", "02:00:00:00:0d:02"
	for _, img := range []string{"nbt-a", "nbt-b"} {
		g.Expect(os.MkdirAll(filepath.Join(imageStore, img), 0o755)).To(Succeed())
		for _, f := range []string{qemu.KernelFile, qemu.InitrdFile} {
			g.Expect(os.WriteFile(filepath.Join(imageStore, img, f), []byte(img+"/"+f), 0o644)).To(Succeed())
		}
	}
	g.Expect(env.Client.Create(ctx, bootPool(ns, "lan", "nbt", "10.85.0"))).To(Succeed())
	g.Expect(env.Client.Create(ctx, machine(ns, "vm", "nbt", mine, "nbt-a", machinev1alpha1.PowerOff))).To(Succeed())
	g.Expect(env.Client.Create(ctx, machine(other, "intruder", "nbt", theirs, "nbt-b", machinev1alpha1.PowerOff))).To(Succeed())
	g.Expect(env.Client.Create(ctx, config(ns, "stolen", "nbt", theirs))).To(Succeed())
	mineIP, theirIP := allocated(ctx, g, ns, "vm"), allocated(ctx, g, ns, "stolen")
	testenv.Eventually(g, func(g Gomega) { agentReady(ctx, g, ns, "lan", dhcpv1alpha1.ServingReason) }).Should(Succeed())

	nw := dhcptest.Existing(machineNetns, qemu.BridgeName("nbt"))
	t.Cleanup(nw.Close)
	addClient := func(mac, ip string) string {
		cns, err := nw.AddClient(ctx, mac)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = netns.Run(ctx, cns, "ip", "addr", "add", ip+"/24", "dev", "eth0")
		g.Expect(err).NotTo(HaveOccurred())
		return cns
	}
	myNS, theirNS := addClient(mine, mineIP), addClient(theirs, theirIP)
	base := fmt.Sprintf("http://10.85.0.2:%d", dhcp.DefaultNetBootPort)
	get := func(from, path string) (int, string) {
		var code int
		var body string
		g.Eventually(func() error {
			var err error
			code, body, err = netnsGet(ctx, from, base+path)
			return err
		}).WithTimeout(10 * time.Second).Should(Succeed())
		return code, body
	}

	before := netbootCount(g, "script", "200")
	code, body := get(myNS, "/boot/"+mine+".ipxe")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(Equal("#!ipxe\nkernel " + base + "/images/nbt-a/vmlinuz " + qemu.KernelCmdline +
		"\ninitrd " + base + "/images/nbt-a/initrd.gz\nboot\n"))
	g.Expect(netbootCount(g, "script", "200")).To(Equal(before + 1))
	code, body = get(myNS, "/images/nbt-a/initrd.gz")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(Equal("nbt-a/initrd.gz"))
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(bootEvents(ctx, g, ns, "vm")).To(ContainElement("served image nbt-a"))
	}).Should(Succeed())

	notFound := netbootCount(g, "script", "404")
	code, _ = get(theirNS, "/boot/"+theirs+".ipxe")
	g.Expect(code).To(Equal(http.StatusNotFound), "a Machine of another namespace is not booted by this pool")
	g.Expect(netbootCount(g, "script", "404")).To(Equal(notFound + 1))
	code, _ = get(theirNS, "/images/nbt-b/vmlinuz")
	g.Expect(code).To(Equal(http.StatusNotFound))
	code, _ = get(theirNS, "/boot/"+mine+".ipxe")
	g.Expect(code).To(Equal(http.StatusNotFound), "another client's script")
	code, _ = get(myNS, "/images/nbt-b/vmlinuz")
	g.Expect(code).To(Equal(http.StatusNotFound), "an image that is not the Machine's")
	g.Expect(bootEvents(ctx, g, other, "intruder")).To(BeEmpty())

	// The Machine's image changes: the next script names the new one.
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "vm"}, m)).To(Succeed())
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.Image = "nbt-b"
	g.Expect(env.Client.Patch(ctx, m, patch)).To(Succeed())
	g.Eventually(func() string {
		_, body := get(myNS, "/boot/"+mine+".ipxe")
		return body
	}).WithTimeout(30 * time.Second).Should(ContainSubstring("/images/nbt-b/vmlinuz"))
}

func setPower(t *testing.T, g Gomega, ns, name string, p machinev1alpha1.PowerState, change func(*machinev1alpha1.Machine)) {
	t.Helper()
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, m)).To(Succeed())
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.PowerState = p
	if change != nil {
		change(m)
	}
	g.Expect(env.Client.Patch(t.Context(), m, patch)).To(Succeed())
}

// A real VM (QEMU, TCG without usable KVM) of a QemuMachine with
// bootDevice Network, on a pool with networkBoot: QEMU's iPXE ROM gets the
// boot script URL from the agent, loads the busybox image's kernel and
// initrd over HTTP and boots it; the guest's own DHCP client then gets its
// lease. Then the Machine's image changes (as the upgrade controller does
// it: image, bootDevice Network, bootOnce) and the Machine is power-cycled:
// the VM boots the new image, again over the network (its init prints the
// new image's name, the Machine gets an Event naming it, and the agent
// counted the kernel and initrd it served).
func TestNetworkBootOfTheMachinesImage(t *testing.T) {
	testenv.Need(t, env)
	testenv.NeedRoot(t, "network boot VM test", "bridges and taps")
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.NeedPeer(t, "network boot VM test", "qemu-system-x86_64 is not installed")
	}
	g := NewWithT(t)
	ctx := t.Context()
	if err := nb.UpgradeImages(ctx); err != nil {
		testenv.NeedPeer(t, "network boot VM test", "the test images: "+err.Error())
	}
	ns := env.NewNamespace(t)
	const mac = "02:00:00:00:0e:01"
	nics := []qemu.NIC{{Name: "eth0", Network: "nbvm", MAC: mac}}
	host := &qemu.Host{StateDir: stateDir, Netns: machineNetns}
	vm := ns + "/vm"
	t.Cleanup(func() {
		// The Machine takes its QemuMachine and the VM with it; the host
		// removal below is the safety net (VM and tap) if it did not.
		cctx := context.WithoutCancel(ctx)
		_ = env.Client.Delete(cctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}})
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if env.Client.Get(cctx, types.NamespacedName{Namespace: ns, Name: "vm"}, &infrastructurev1alpha1.QemuMachine{}) != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := host.Remove(cctx, vm, nics); err != nil {
			t.Errorf("removing VM %s: %v", vm, err)
		}
	})
	g.Expect(env.Client.Create(ctx, bootPool(ns, "lan", "nbvm", "10.84.0"))).To(Succeed())
	qm := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}}
	qm.Spec.PowerState = machinev1alpha1.PowerOff
	g.Expect(env.Client.Create(ctx, qm)).To(Succeed())
	g.Expect(env.Client.Create(ctx, machine(ns, "vm", "nbvm", mac, "busybox", machinev1alpha1.PowerOff))).To(Succeed())
	ip := allocated(ctx, g, ns, "vm")
	testenv.Eventually(g, func(g Gomega) { agentReady(ctx, g, ns, "lan", dhcpv1alpha1.ServingReason) }).Should(Succeed())
	lease := qemu.LeaseMarker + " eth0 " + ip + "/24"
	console := host.ConsoleLog(vm)
	read := func() string {
		b, _ := os.ReadFile(console)
		return string(b)
	}
	kernels, initrds := netbootCount(g, qemu.KernelFile, "200"), netbootCount(g, qemu.InitrdFile, "200")

	start := time.Now()
	setPower(t, g, ns, "vm", machinev1alpha1.PowerOn, nil)
	g.Eventually(read).WithTimeout(240*time.Second).WithPolling(500*time.Millisecond).Should(
		And(ContainSubstring(qemu.InitMarker), ContainSubstring(lease)), "the network-booted guest starts and gets its lease")
	t.Logf("first network boot: init and lease on the console %.1fs after power on", time.Since(start).Seconds())
	g.Expect(read()).NotTo(ContainSubstring(qemu.ImageMarker))
	g.Expect(netbootCount(g, qemu.KernelFile, "200")).To(BeNumerically(">", kernels), "the kernel came over HTTP")
	g.Expect(netbootCount(g, qemu.InitrdFile, "200")).To(BeNumerically(">", initrds), "the initrd came over HTTP")
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "vm"}, qm)).To(Succeed())
		g.Expect(qm.Status.BootDevice).To(Equal(machinev1alpha1.BootNetwork))
		g.Expect(bootEvents(ctx, g, ns, "vm")).To(Equal([]string{"served image busybox"}))
	}).Should(Succeed())

	// The upgrade: new image, network boot once, power cycle.
	setPower(t, g, ns, "vm", machinev1alpha1.PowerOff, func(m *machinev1alpha1.Machine) {
		m.Spec.Image, m.Spec.BootOnce = "busybox-v2", true
	})
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "vm"}, qm)).To(Succeed())
		g.Expect(qm.Spec.Image).To(Equal("busybox-v2"))
		g.Expect(qm.Status.PowerState).To(Equal(machinev1alpha1.PowerOff))
		g.Expect(host.PID(vm)).To(BeZero())
	}).Should(Succeed())
	kernels, initrds = netbootCount(g, qemu.KernelFile, "200"), netbootCount(g, qemu.InitrdFile, "200")
	start = time.Now()
	setPower(t, g, ns, "vm", machinev1alpha1.PowerOn, nil)
	g.Eventually(read).WithTimeout(240*time.Second).WithPolling(500*time.Millisecond).Should(
		And(ContainSubstring(qemu.ImageMarker+" busybox-v2"), ContainSubstring(lease)), "the new image boots and gets the lease")
	t.Logf("second network boot: the new image's marker and lease on the console %.1fs after power on", time.Since(start).Seconds())
	g.Expect(netbootCount(g, qemu.KernelFile, "200")).To(BeNumerically(">", kernels))
	g.Expect(netbootCount(g, qemu.InitrdFile, "200")).To(BeNumerically(">", initrds))
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "vm"}, qm)).To(Succeed())
		g.Expect(qm.Status.BootDevice).To(Equal(machinev1alpha1.BootNetwork))
		g.Expect(bootEvents(ctx, g, ns, "vm")).To(ContainElement("served image busybox-v2"))
	}).Should(Succeed())
	g.Expect(strings.Count(read(), qemu.InitMarker)).To(Equal(1), "one boot in this QEMU process")
}

// A boot server that cannot listen (its port taken in the namespace) is
// reported on the pool (AgentReady False, naming network boot), and serves
// once the port is free again.
func TestNetBootPortTakenIsReported(t *testing.T) {
	testenv.Need(t, env)
	testenv.NeedRoot(t, "network boot test", "network namespaces")
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	// The agent made the namespace when the suite started its first pool;
	// make sure it is there before listening in it.
	g.Expect(env.Client.Create(ctx, pool(ns, "plain", "nbport0", "10.82.0", 60))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) { agentReady(ctx, g, ns, "plain", dhcpv1alpha1.ServingReason) }).Should(Succeed())
	// The pool's server address and port, taken before the agent gives the
	// bridge that address (IP_FREEBIND binds an address not yet local).
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1) }); err != nil {
			return err
		}
		return serr
	}}
	var ln net.Listener
	g.Expect(netns.Do(machineNetns, func() (err error) {
		ln, err = lc.Listen(ctx, "tcp", fmt.Sprintf("10.83.0.2:%d", dhcp.DefaultNetBootPort))
		return err
	})).To(Succeed())
	closed := false
	release := func() {
		if !closed {
			closed = true
			_ = ln.Close()
		}
	}
	defer release()
	g.Expect(env.Client.Create(ctx, bootPool(ns, "lan", "nbport", "10.83.0"))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		p := agentReady(ctx, g, ns, "lan", dhcpv1alpha1.AgentUnavailableReason)
		c := findCondition(p, dhcpv1alpha1.AgentReadyCondition)
		g.Expect(c).To(ContainSubstring("network boot on network nbport"))
	}).Should(Succeed())
	release()
	testenv.Eventually(g, func(g Gomega) { agentReady(ctx, g, ns, "lan", dhcpv1alpha1.ServingReason) }).Should(Succeed())
}

func findCondition(p *dhcpv1alpha1.IPPool, typ string) string {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}
