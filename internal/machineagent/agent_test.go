package machineagent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/qemumachine"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/replicas"
	"github.com/converge-dev/converge/internal/testenv"
)

const (
	wait    = 180 * time.Second
	polling = 200 * time.Millisecond
)

// cluster is a manager in agent mode and one machine agent per node, each
// a `converge` process; stopped processes are replaced in place, and every
// one still running is killed at the end of the test.
type cluster struct {
	t             *testing.T
	exe, dir      string
	ns, leaseNS   string
	mu            sync.Mutex
	manager       *replicas.Replica
	agents        map[string]*replicas.Replica
	states        map[string]string
	managerStarts int
	agentStarts   map[string]int
	// agentConfig reaches the API server as the agents' ServiceAccount,
	// holding exactly the chart's rights.
	agentConfig *rest.Config
}

// agentIdentity grants the ServiceAccount machine-agent of c.leaseNS what
// the chart grants the agent: the generated ClusterRole
// (config/rbac/machineagent/role.yaml) and a Role on Leases in the Lease
// namespace; it returns a configuration impersonating it.
func (c *cluster) agentIdentity(root string) *rest.Config {
	t := c.t
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "machineagent", "role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	cr := &rbacv1.ClusterRole{}
	g.Expect(yaml.Unmarshal(data, cr)).To(Succeed())
	cr.ObjectMeta = metav1.ObjectMeta{Name: c.leaseNS + "-machine-agent"}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "machine-agent", Namespace: c.leaseNS}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name}, Subjects: []rbacv1.Subject{sa},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: c.leaseNS, Name: "machine-agent-lease"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: c.leaseNS, Name: role.Name}, Subjects: []rbacv1.Subject{sa},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	for _, o := range []client.Object{cr, crb, role, rb} {
		g.Expect(env.Client.Create(t.Context(), o)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(t.Context()), o) })
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + c.leaseNS + ":machine-agent",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + c.leaseNS, "system:authenticated"}}
	// RBAC is enforced once the bindings reach the authorizer's cache.
	g.Eventually(func(g Gomega) {
		cl, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cl.List(t.Context(), &infrastructurev1alpha1.QemuMachineList{})).To(Succeed())
		err = cl.Get(t.Context(), client.ObjectKey{Namespace: c.leaseNS, Name: "none"}, &coordinationv1.Lease{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "reading a Lease: %v", err)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	// And nothing more: no Secrets, no Lease outside its namespace.
	cl, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apierrors.IsForbidden(cl.List(t.Context(), &corev1.SecretList{}))).To(BeTrue(), "the agent reads no Secret")
	g.Expect(apierrors.IsForbidden(cl.Get(t.Context(), client.ObjectKey{Namespace: c.ns, Name: "none"}, &coordinationv1.Lease{}))).
		To(BeTrue(), "the agent reads no Lease outside its namespace")
	return cfg
}

func newCluster(t *testing.T, nodes ...string) *cluster {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	exe, err := replicas.Build(t.Context(), root, dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, exe: exe, dir: dir, ns: env.NewNamespace(t), leaseNS: env.NewNamespace(t),
		agents: map[string]*replicas.Replica{}, states: map[string]string{}, agentStarts: map[string]int{}}
	c.agentConfig = c.agentIdentity(root)
	for _, n := range nodes {
		// Short: the QMP socket's path must fit a sockaddr_un.
		st, err := os.MkdirTemp("", "cvma")
		if err != nil {
			t.Fatal(err)
		}
		c.states[n] = st
		t.Cleanup(func() { _ = os.RemoveAll(st) })
		// Runs after the processes are gone: whatever VM is left is quit.
		t.Cleanup(func() { _ = (&qemu.Host{StateDir: st}).StopAll() })
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range c.agents {
			_ = r.Stop()
		}
		if c.manager != nil {
			_ = c.manager.Stop()
		}
		if t.Failed() {
			c.dumpLogs()
		}
	})
	return c
}

func (c *cluster) dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		c.t.Logf("--- %s (tail) ---\n%s", filepath.Base(l), b)
	}
}

// startManager starts `converge run --qemu-machines=agent` serving c.ns.
func (c *cluster) startManager() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.managerStarts++
	r, err := replicas.Start(env.Config, c.exe, c.dir, fmt.Sprintf("manager-%d", c.managerStarts),
		"--controllers", qemumachine.ControllerName, "--qemu-machines", "agent", "--watch-namespace", c.ns,
		"--machine-agent-lease-namespace", c.leaseNS, "--machine-agent-check-interval", "500ms",
		"--webhook-port", "0", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--receiver-bind-address", "0", "--acme-http01-bind-address", "0", "--graceful-shutdown-timeout", "5s")
	if err != nil {
		c.t.Fatal(err)
	}
	c.manager = r
}

// startAgent starts `converge agent machines` for node.
func (c *cluster) startAgent(node string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.agentStarts[node]++
	r, err := replicas.StartVerb(c.agentConfig, c.exe, c.dir, fmt.Sprintf("agent-%s-%d", node, c.agentStarts[node]),
		[]string{"agent", "machines"}, "--node-name", node, "--lease-namespace", c.leaseNS,
		"--lease-duration", "3s", "--renew-interval", "500ms", "--health-probe-bind-address", "0",
		"--machine-state-dir", c.states[node], "--machine-image-dir", imageDir, "--machine-power-down-grace", "500ms")
	if err != nil {
		c.t.Fatal(err)
	}
	c.agents[node] = r
}

// ensureAgents starts again every agent that is not running.
func (c *cluster) ensureAgents() {
	c.t.Helper()
	var dead []string
	c.mu.Lock()
	for n, r := range c.agents {
		select {
		case <-r.Exited():
			dead = append(dead, n)
		default:
		}
	}
	c.mu.Unlock()
	for _, n := range dead {
		c.startAgent(n)
	}
}

// kill sends SIGKILL to r and waits for it to exit.
func kill(t *testing.T, r *replicas.Replica) {
	t.Helper()
	if err := r.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Exited():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit after SIGKILL", r.Name)
	}
	_ = r.Stop() // closes its proxy
}

func getQM(t *testing.T, g Gomega, ns, name string) *infrastructurev1alpha1.QemuMachine {
	qm := &infrastructurev1alpha1.QemuMachine{}
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, qm)).To(Succeed())
	return qm
}

func reason(qm *infrastructurev1alpha1.QemuMachine, typ string) string {
	if c := meta.FindStatusCondition(qm.Status.Conditions, typ); c != nil {
		return c.Reason
	}
	return ""
}

func consoleCount(path, marker string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), marker)
}

func alive(pid int32) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// newQM creates a QemuMachine powered On by its own spec, and deletes it
// at the end of the test while the agents still run (they remove its VM
// and finalizer).
func (c *cluster) newQM(name, mac string) {
	t := c.t
	qm := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name}}
	qm.Spec.Image = "busybox"
	qm.Spec.PowerState = machinev1alpha1.PowerOn
	qm.Spec.NetworkInterfaces = []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: "lan", MACAddress: mac}}
	NewWithT(t).Expect(env.Client.Create(t.Context(), qm)).To(Succeed())
	t.Cleanup(func() {
		c.ensureAgents() // a test that failed with an agent down
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), wait)
		defer cancel()
		_ = env.Client.Delete(ctx, qm)
		gone := func() bool { return env.Client.Get(ctx, client.ObjectKeyFromObject(qm), qm) != nil }
		if !NewWithT(t).Eventually(gone).WithTimeout(wait).Should(BeTrue(), "QemuMachine %s removed by its agent", name) {
			// Leave nothing behind: the VM is quit with the state
			// directories; the object goes without its finalizer.
			base := qm.DeepCopy()
			qm.Finalizers = nil
			_ = env.Client.Patch(ctx, qm, client.MergeFrom(base))
		}
	})
}

// vm is what a test remembers of a running VM.
type vm struct {
	node, console string
	pid           int32
}

// running waits until name runs under the agent of its node: bound,
// PoweredOn, the agent heartbeating, its console (in that agent's state
// directory) showing init once.
func (c *cluster) running(g Gomega, name string) vm {
	t := c.t
	var v vm
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, c.ns, name)
		g.Expect(qm.Spec.NodeName).NotTo(BeEmpty(), "bound")
		g.Expect(qm.Status.NodeName).To(Equal(qm.Spec.NodeName), "status names the node running it")
		g.Expect(reason(qm, infrastructurev1alpha1.ReadyCondition)).To(Equal(infrastructurev1alpha1.PoweredOnReason))
		g.Expect(reason(qm, infrastructurev1alpha1.AgentReadyCondition)).To(Equal(infrastructurev1alpha1.AgentHeartbeatingReason))
		g.Expect(qm.Status.ConsoleLog).To(HavePrefix(c.states[qm.Spec.NodeName]+"/"), "run by the agent of node %s", qm.Spec.NodeName)
		g.Expect(consoleCount(qm.Status.ConsoleLog, qemu.InitMarker)).To(Equal(1), "init started once")
		v = vm{node: qm.Spec.NodeName, console: qm.Status.ConsoleLog, pid: qm.Status.PID}
	}).WithTimeout(wait).WithPolling(polling).Should(Succeed())
	return v
}

// untouched asserts that v's QEMU keeps running undisturbed: the same
// process, the guest's uptime counting on, no second boot.
func (c *cluster) untouched(g Gomega, name string, v vm) {
	t := c.t
	uptimes := consoleCount(v.console, qemu.UptimeMarker)
	g.Eventually(func() int { return consoleCount(v.console, qemu.UptimeMarker) }).
		WithTimeout(wait).WithPolling(polling).Should(BeNumerically(">", uptimes+2), "%s: the guest kept running", name)
	g.Expect(alive(v.pid)).To(BeTrue(), "%s: QEMU %d still runs", name, v.pid)
	g.Expect(consoleCount(v.console, qemu.InitMarker)).To(Equal(1), "%s: no second boot", name)
	qm := getQM(t, g, c.ns, name)
	g.Expect(qm.Status.PID).To(Equal(v.pid), "%s: the same QEMU process", name)
	g.Expect(qm.Spec.NodeName).To(Equal(v.node), "%s: still bound to its node", name)
}

// TestAgentMode: with the manager in agent mode, QemuMachines are bound
// to the nodes of heartbeating agents (none: NoAgentAvailable; then
// fewest machines first: one VM per node) and boot under their own
// node's agent. Killing and restarting the manager touches no VM. An
// agent killed with SIGKILL leaves its VM running and bound
// (AgentNotHeartbeating, never started elsewhere); restarted, it
// re-attaches to the same QEMU (a reset through QMP reaches it). Changing
// spec.nodeName is refused, naming the field.
func TestAgentMode(t *testing.T) {
	testenv.Need(t, env)
	if testing.Short() && os.Getenv("CI") == "" { // CI runs it, -short or not
		t.Skip("builds and runs converge processes and QEMU VMs")
	}
	g := NewWithT(t)
	c := newCluster(t, "node-a", "node-b")
	c.startManager()

	// No agent yet: nothing can take it.
	c.newQM("one", "02:00:00:00:03:01")
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, c.ns, "one")
		g.Expect(reason(qm, infrastructurev1alpha1.AgentReadyCondition)).To(Equal(infrastructurev1alpha1.NoAgentAvailableReason))
		g.Expect(qm.Spec.NodeName).To(BeEmpty())
		g.Expect(qm.Finalizers).To(BeEmpty(), "no agent touched it")
	}).WithTimeout(wait).WithPolling(polling).Should(Succeed())

	c.startAgent("node-a")
	c.startAgent("node-b")
	one := c.running(g, "one")
	// The second goes to the node with fewer QemuMachines: the other one.
	c.newQM("two", "02:00:00:00:03:02")
	two := c.running(g, "two")
	g.Expect(two.node).NotTo(Equal(one.node), "fewest machines first")

	// A binding never changes: the API server refuses it, naming the field.
	qm := getQM(t, g, c.ns, "one")
	base := qm.DeepCopy()
	qm.Spec.NodeName = two.node
	err := env.Client.Patch(t.Context(), qm, client.MergeFrom(base))
	g.Expect(err).To(MatchError(ContainSubstring("spec.nodeName is immutable")))
	qm = getQM(t, g, c.ns, "one")
	base = qm.DeepCopy()
	qm.Spec.NodeName = ""
	g.Expect(env.Client.Patch(t.Context(), qm, client.MergeFrom(base))).To(MatchError(ContainSubstring("spec.nodeName is immutable")), "nor unbound")

	// The manager killed and started again: no VM notices.
	kill(t, c.manager)
	c.untouched(g, "one", one)
	c.startManager()
	c.untouched(g, "one", one)
	c.untouched(g, "two", two)

	// The agent of "one" killed: its VM runs on, bound, reported.
	kill(t, c.agents[one.node])
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, c.ns, "one")
		cond := meta.FindStatusCondition(qm.Status.Conditions, infrastructurev1alpha1.AgentReadyCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(infrastructurev1alpha1.AgentNotHeartbeatingReason))
		g.Expect(cond.Message).To(ContainSubstring("node " + one.node + " is not heartbeating"))
	}).WithTimeout(wait).WithPolling(polling).Should(Succeed())
	c.untouched(g, "one", one)
	g.Expect(reason(getQM(t, g, c.ns, "two"), infrastructurev1alpha1.AgentReadyCondition)).To(Equal(infrastructurev1alpha1.AgentHeartbeatingReason))

	// Restarted, the agent re-attaches to the same QEMU.
	c.startAgent(one.node)
	g.Eventually(func(g Gomega) {
		g.Expect(reason(getQM(t, g, c.ns, "one"), infrastructurev1alpha1.AgentReadyCondition)).To(Equal(infrastructurev1alpha1.AgentHeartbeatingReason))
	}).WithTimeout(wait).WithPolling(polling).Should(Succeed())
	c.untouched(g, "one", one)
	// A reset goes through the QMP socket of the QEMU it re-attached to.
	qm = getQM(t, g, c.ns, "one")
	base = qm.DeepCopy()
	qm.Annotations = map[string]string{qemumachine.ResetAnnotation: "after-restart"}
	g.Expect(env.Client.Patch(t.Context(), qm, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func(g Gomega) {
		qm := getQM(t, g, c.ns, "one")
		g.Expect(qm.Status.LastResetToken).To(Equal("after-restart"))
		g.Expect(qm.Status.PID).To(Equal(one.pid), "a reset keeps the process")
		g.Expect(consoleCount(one.console, qemu.InitMarker)).To(BeNumerically(">=", 2), "the reset rebooted the guest in the same QEMU")
	}).WithTimeout(wait).WithPolling(polling).Should(Succeed())
}
