package dhcpagent_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	convergeconfig "github.com/converge-dev/converge/config"
	"github.com/converge-dev/converge/internal/controller/dhcpagent"
	"github.com/converge-dev/converge/internal/dhcp/dhcptest"
	"github.com/converge-dev/converge/internal/localcp"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/replicas"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// agentProc is one `converge agent dhcp` process.
type agentProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (a *agentProc) output() string {
	b, _ := os.ReadFile(a.log)
	return string(b)
}

// startAgent runs the converge binary's `agent dhcp` with args; it is
// killed at the end of the test (and with the test binary).
func startAgent(t *testing.T, exe, name string, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	f, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	a.cmd = exec.Command(exe, append([]string{"agent", "dhcp"}, args...)...)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatal(err)
	}
	go func() { _ = a.cmd.Wait(); _ = f.Close(); close(a.done) }()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			_ = a.cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			t.Logf("agent %s's log:\n%s", name, a.output())
		}
	})
	return a
}

// agentKubeconfig writes a kubeconfig that acts as ServiceAccount sa of ns
// (impersonated by the suite's admin) bound to the agent's generated
// ClusterRole (config/rbac/dhcp-agent/role.yaml) and nothing else.
func agentKubeconfig(t *testing.T, ns, sa string) string {
	t.Helper()
	ctx := t.Context()
	data, err := convergeconfig.Manifests.ReadFile("rbac/dhcp-agent/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		t.Fatalf("decoding the agent's ClusterRole: %v", err)
	}
	role.ObjectMeta = metav1.ObjectMeta{Name: "dhcp-agent-" + ns}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dhcp-agent-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}}
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), role) })
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), binding) })
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa)
	// Wait until the API server enforces the binding.
	deadline := time.Now().Add(30 * time.Second)
	for {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: dhcpv1alpha1.GroupVersion.Group, Resource: "ippools"}}}
		if err := env.Client.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's binding is not enforced after 30s: %s", sar.Status.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData, CertificateAuthority: c.CAFile}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertData, ClientKeyData: c.KeyData,
		ClientCertificate: c.CertFile, ClientKey: c.KeyFile, Token: c.BearerToken, Impersonate: user}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: ns}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "agent.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func leaseHolder(ctx context.Context, g Gomega, ns, network string) string {
	l := &coordinationv1.Lease{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: dhcpagent.LeaseName(network)}, l)).To(Succeed())
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// The standalone agent (`converge agent dhcp`, cluster mode) as a real
// process with only its generated RBAC: it serves a real client on a
// bridge the test made, from the IPPool's allocations; a second agent of
// the same network stands by (no socket); SIGTERM to the first releases the Lease and
// the second takes over well before the Lease would expire, and the client
// renews its address from it; with kube-apiserver stopped (SIGSTOP) the
// second keeps serving and the client keeps renewing.
func TestClusterAgentProcessFailover(t *testing.T) {
	testenv.Need(t, env)
	testenv.NeedRoot(t, "cluster-mode DHCP agent test", "network namespaces")
	if _, err := exec.LookPath("udhcpc"); err != nil {
		testenv.NeedPeer(t, "cluster-mode DHCP agent test", "udhcpc is not installed")
	}
	g := NewWithT(t)
	ctx := t.Context()
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	exe, err := replicas.Build(ctx, root, t.TempDir()) // as `make build` builds it
	g.Expect(err).NotTo(HaveOccurred())

	// Pools of shard "clu": the suite's manager (and its agent) leave them
	// alone; a manager of that shard allocates.
	const network, shard, mac, bridge = "clu", "clu", "02:00:00:00:0c:01", "br-clu"
	env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"ippool"}
		o.ShardKey = shard
	})
	ns := env.NewNamespace(t)
	p := pool(ns, "lan", network, "10.93.0", 10)
	p.Labels = map[string]string{setup.ShardLabel: shard}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	mnc := config(ns, "vm1", network, mac)
	mnc.Labels = map[string]string{setup.ShardLabel: shard}
	g.Expect(env.Client.Create(ctx, mnc)).To(Succeed())
	var ip string
	testenv.Eventually(g, func(g Gomega) {
		m := &dhcpv1alpha1.MachineNetworkConfig{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "vm1"}, m)).To(Succeed())
		g.Expect(reconcile.IsTrue(m.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
		ip = m.Status.NetworkConfigs[0].AllocatedIPAddress
	}).Should(Succeed())

	nw, err := dhcptest.New(ctx, bridge, netip.MustParsePrefix("10.93.0.2/24"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(nw.Close)
	kc := agentKubeconfig(t, ns, "dhcp-agent")
	// A long Lease: a takeover within a few seconds comes from the release.
	args := []string{"--kubeconfig", kc, "--network", network, "--interface", bridge, "--netns", nw.Netns,
		"--lease-namespace", ns, "--lease-duration", "30s", "--renew-interval", "300ms"}
	a := startAgent(t, exe, "a", append(args, "--identity", "agent-a")...)
	testenv.Eventually(g, func(g Gomega) {
		p := agentReady(ctx, g, ns, "lan", dhcpv1alpha1.ServingReason)
		g.Expect(p.Status.Agent).To(Equal(dhcpv1alpha1.AgentStatus{Interface: bridge, Netns: nw.Netns, Identity: "agent-a"}))
	}).Should(Succeed())

	cns, err := nw.AddClient(ctx, mac)
	g.Expect(err).NotTo(HaveOccurred())
	c, err := dhcptest.Udhcpc(ctx, cns, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(c.Stop)
	ev, seen, err := c.WaitEvent(ctx, 0, 30*time.Second, "bound")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ev.Vars).To(HaveKeyWithValue("ip", ip))
	g.Expect(ev.Vars).To(HaveKeyWithValue("serverid", "10.93.0.2"))

	// A second agent of the network stands by.
	b := startAgent(t, exe, "b", append(args, "--identity", "agent-b")...)
	g.Eventually(b.output).WithTimeout(30 * time.Second).Should(ContainSubstring("Starting the DHCP agent"))
	g.Consistently(func(g Gomega) {
		g.Expect(leaseHolder(ctx, g, ns, network)).To(Equal("agent-a"))
		g.Expect(b.output()).NotTo(ContainSubstring("Serving the network"))
	}).WithTimeout(2 * time.Second).Should(Succeed())
	// Only the holder has a DHCP socket in the namespace.
	out, err := netns.Run(ctx, nw.Netns, "ss", "-H", "-lunp", "sport = :67")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring(fmt.Sprintf("pid=%d,", a.cmd.Process.Pid)))
	g.Expect(string(out)).NotTo(ContainSubstring(fmt.Sprintf("pid=%d,", b.cmd.Process.Pid)))

	// SIGTERM: the first releases the Lease, the second serves at once.
	g.Expect(a.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	g.Eventually(a.done).WithTimeout(10 * time.Second).Should(BeClosed())
	g.Expect(a.output()).To(ContainSubstring("Released the network's Lease"))
	g.Eventually(func(g Gomega) {
		g.Expect(leaseHolder(ctx, g, ns, network)).To(Equal("agent-b"))
		p := agentReady(ctx, g, ns, "lan", dhcpv1alpha1.ServingReason)
		g.Expect(p.Status.Agent.Identity).To(Equal("agent-b"))
	}).WithTimeout(5 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	evs, err := c.Events()
	g.Expect(err).NotTo(HaveOccurred())
	seen = max(seen, len(evs))
	ev, seen, err = c.WaitEvent(ctx, seen, 30*time.Second, "renew")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ev.Vars).To(HaveKeyWithValue("ip", ip))
	g.Expect(b.output()).To(ContainSubstring("Serving the network"))

	// The API server stops answering: the holder keeps serving from its
	// cache, and the client renews twice.
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
	for range 2 {
		ev, seen, err = c.WaitEvent(ctx, seen, 30*time.Second, "renew")
		g.Expect(err).NotTo(HaveOccurred(), "renewal while kube-apiserver (pid %d) is stopped", pid)
		g.Expect(ev.Vars).To(HaveKeyWithValue("ip", ip))
	}
	resume()
	g.Expect(b.output()).NotTo(ContainSubstring("Standing by"))
}
