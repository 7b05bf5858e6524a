package e2e

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/qemu"
)

// verbsSuccess drives the success path of each verb not walked by the
// rollout above, on the same `converge up`, and checks what each one did to
// the cluster, not only its exit code: tree, why and ui on the
// BasicDeployment; cert status, inspect and renew on the pki sample; diff,
// reconcile and approve-prune on a Sync of a file:// repository; machine
// list and power on the machine sample; and every upgrade verb on a
// MachineUpgrade of that kwok Machine held by a pre-check that cannot pass.
func verbsSuccess(t *testing.T, e *env, root string,
	cv func(args ...string) (string, int), ok func(args ...string) string,
	get func(args ...string) string, apply func(yaml string)) {
	g := NewWithT(t)
	const wait = 2 * time.Minute

	// tree and why on a Current BasicDeployment: the replica set below it,
	// and exit 0 (why exits 2 when the object is not Current).
	rs := strings.TrimSpace(get("basicreplicasets", "-o", "jsonpath={.items[0].metadata.name}"))
	g.Expect(rs).To(HavePrefix("web-"))
	tree := ok("tree", "bd/web")
	t.Logf("converge tree bd/web:\n%s", tree)
	g.Expect(tree).To(ContainSubstring("BasicDeployment/web"))
	g.Expect(tree).To(ContainSubstring("BasicReplicaSet/" + rs))
	g.Expect(ok("tree", "bd/web", "-o", "json")).To(ContainSubstring(`"` + rs + `"`))
	why := ok("why", "bd/web")
	t.Logf("converge why bd/web:\n%s", why)
	g.Expect(why).To(ContainSubstring("BasicDeployment/web"))
	g.Expect(why).To(ContainSubstring("Current"))

	// ui: the page is served once with this run's token, shows the graph
	// below the object, and a request without the token is refused.
	ui := exec.Command(e.converge, "ui", "bd/web", "--kubeconfig", filepath.Join(e.dataDir, "kubeconfig"), "-n", "verbs")
	ui.Env = append(os.Environ(), "KUBECONFIG=")
	stdout, err := ui.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	ui.Stderr = ui.Stdout
	g.Expect(ui.Start()).To(Succeed())
	t.Cleanup(func() { _ = ui.Process.Kill(); _ = ui.Wait() })
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 4 && f[2] == "open" {
				first <- f[3]
			}
		}
	}()
	var url string
	select {
	case url = <-first:
	case <-time.After(wait):
		t.Fatal("converge ui printed no URL")
	}
	g.Expect(url).To(MatchRegexp(`^http://127\.0\.0\.1:\d+/\?token=.+`))
	fetch := func(u string) (int, string) {
		resp, err := http.Get(u) //nolint:noctx // the URL converge ui printed, on loopback
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, string(b)
	}
	g.Eventually(func(g Gomega) {
		code, page := fetch(url)
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(page).To(ContainSubstring("<title>converge ui: bd/web in verbs</title>"))
		g.Expect(page).To(ContainSubstring(rs), "the graph below web is on the page")
	}).WithTimeout(wait).Should(Succeed())
	code, body := fetch(strings.Split(url, "?")[0])
	g.Expect(code).To(Equal(http.StatusForbidden), body)
	g.Expect(ui.Process.Signal(os.Interrupt)).To(Succeed())
	g.Expect(ui.Wait()).To(Succeed(), "Ctrl-C stops the server cleanly")

	// cert status, inspect and renew on the pki sample: the renewal issues a
	// new certificate into the same Secret.
	out, err := e.kubectl(t, "-n", "verbs", "apply", "-f", filepath.Join(root, "config/samples/pki_v1alpha1_certificate.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func() string {
		return get("certificate", "web-tls", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	}).WithTimeout(wait).Should(Equal("True"))
	status := ok("cert", "status", "web-tls")
	t.Logf("converge cert status web-tls:\n%s", status)
	g.Expect(status).To(ContainSubstring("web.default.svc"))
	g.Expect(status).To(MatchRegexp(`Revision:\s+1`))
	inspect := ok("cert", "inspect", "secret", "web-tls")
	t.Logf("converge cert inspect secret web-tls:\n%s", inspect)
	g.Expect(inspect).To(ContainSubstring("example-ca"))
	before := get("secret", "web-tls", "-o", `jsonpath={.data.tls\.crt}`)
	g.Expect(ok("cert", "renew", "web-tls")).To(Equal("Renewal of verbs/web-tls requested\n"))
	g.Eventually(func() string {
		return get("certificate", "web-tls", "-o", "jsonpath={.status.revision}")
	}).WithTimeout(wait).Should(Equal("2"))
	g.Eventually(func() string {
		return get("secret", "web-tls", "-o", `jsonpath={.data.tls\.crt}`)
	}).WithTimeout(wait).ShouldNot(Equal(before), "a new certificate is in the Secret")
	g.Expect(ok("cert", "status", "web-tls")).To(MatchRegexp(`Revision:\s+2`))

	// diff, reconcile and approve-prune on a Sync of a file:// repository
	// whose second revision prunes three of its four objects, more than its
	// pruneLimit of one.
	repo := gittest.NewServer(t).NewRepo(t, "app")
	cm := func(name, v string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: verbs\ndata:\n  v: \"" + v + "\"\n"
	}
	repo.Commit(t, "four", map[string]string{"app/a.yaml": cm("cm-a", "1"), "app/b.yaml": cm("cm-b", "1"),
		"app/c.yaml": cm("cm-c", "1"), "app/d.yaml": cm("cm-d", "1")})
	apply(`apiVersion: gitops.converge.dev/v1alpha1
kind: GitRepository
metadata:
  name: app
spec:
  url: ` + repo.FileURL() + `
  interval: 1h
---
apiVersion: gitops.converge.dev/v1alpha1
kind: Sync
metadata:
  name: app
spec:
  sourceRef:
    name: app
  path: app
  prune: true
  pruneLimit: 1
  interval: 1h
`)
	g.Eventually(func() string {
		return get("sync", "app", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	}).WithTimeout(wait).Should(Equal("True"))
	g.Expect(get("configmap", "cm-d", "-o", "jsonpath={.data.v}")).To(Equal("1"))
	g.Expect(ok("diff", "sync", "app")).To(ContainSubstring("4 unchanged"))
	repo.Commit(t, "one left", map[string]string{"app/a.yaml": cm("cm-a", "2"), "app/e.yaml": cm("cm-e", "1")})
	rev2 := repo.Delete(t, "prune three", "app/b.yaml", "app/c.yaml", "app/d.yaml")
	diff := ok("diff", "sync", "app")
	t.Logf("converge diff sync app:\n%s", diff)
	g.Expect(diff).To(ContainSubstring("at revision"))
	g.Expect(diff).To(ContainSubstring(rev2[:7]))
	g.Expect(diff).To(MatchRegexp(`(?m)^\+ .*cm-e created$`))
	g.Expect(diff).To(MatchRegexp(`(?m)^~ .*cm-a configured$`))
	g.Expect(diff).To(MatchRegexp(`(?m)^- .*cm-b pruned$`))
	g.Expect(diff).To(MatchRegexp(`(?m)^- .*cm-d pruned$`))
	_, err = e.kubectl(t, "-n", "verbs", "get", "configmap", "cm-e")
	g.Expect(err).To(HaveOccurred(), "diff changes nothing")
	g.Expect(get("configmap", "cm-a", "-o", "jsonpath={.data.v}")).To(Equal("1"), "diff changes nothing")

	g.Expect(ok("reconcile", "gitrepository", "app")).To(ContainSubstring("reconcile of gitrepository verbs/app requested"))
	g.Expect(get("gitrepository", "app", "-o", "jsonpath={.status.artifact.revision}")).To(ContainSubstring(rev2))
	g.Eventually(func() string {
		return get("sync", "app", "-o", "jsonpath={.status.pendingPrune.count}")
	}).WithTimeout(wait).Should(Equal("3"), "the prune exceeds pruneLimit and is held")
	g.Expect(get("configmap", "cm-a", "-o", "jsonpath={.data.v}")).To(Equal("2"))
	g.Expect(get("configmap", "cm-b", "-o", "jsonpath={.data.v}")).To(Equal("1"), "held, not pruned")
	approve := ok("sync", "approve-prune", "app")
	t.Logf("converge sync approve-prune app:\n%s", approve)
	g.Expect(approve).To(ContainSubstring("approved pruning 3 objects of revision"))
	g.Expect(approve).To(ContainSubstring("cm-c"))
	g.Eventually(func() string {
		out, _ := e.kubectl(t, "-n", "verbs", "get", "configmap", "cm-b", "cm-c", "cm-d", "-o", "name", "--ignore-not-found")
		return out
	}).WithTimeout(wait).Should(BeEmpty(), "the approved prune ran")
	g.Expect(ok("reconcile", "sync", "app")).To(MatchRegexp(`(?m)^✔ `))
	g.Expect(get("sync", "app", "-o", "jsonpath={.status.lastHandledReconcileAt}")).NotTo(BeEmpty())

	// machine list and power on the kwok machine sample.
	out, err = e.kubectl(t, "-n", "verbs", "apply", "-f", filepath.Join(root, "config/samples/machine_v1alpha1_machine.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func() string {
		return get("machine", "worker-1", "-o", "jsonpath={.status.phase}")
	}).WithTimeout(wait).Should(Equal("Running"))
	g.Expect(ok("machine", "list")).To(MatchRegexp(`(?m)^worker-1\s+Running\s+On\s+KwokMachine`))
	g.Expect(ok("machine", "power", "off", "worker-1")).To(Equal("machine.machine.converge.dev/worker-1 powerState Off\n"))
	g.Expect(get("machine", "worker-1", "-o", "jsonpath={.spec.powerState}")).To(Equal("Off"))
	g.Eventually(func() string {
		return get("machine", "worker-1", "-o", "jsonpath={.status.powerState}")
	}).WithTimeout(wait).Should(Equal("Off"))
	g.Expect(ok("machine", "power", "on", "worker-1")).To(Equal("machine.machine.converge.dev/worker-1 powerState On\n"))
	g.Eventually(func() string {
		return get("machine", "worker-1", "-o", "jsonpath={.status.phase}")
	}).WithTimeout(wait).Should(Equal("Running"))

	// Every upgrade verb on a MachineUpgrade of that Machine whose
	// pre-check cannot pass (a kwok Machine has no BMC to power cycle
	// through, so the upgrade is held before any Machine is touched).
	apply(`apiVersion: upgrade.converge.dev/v1alpha1
kind: MachineUpgrade
metadata:
  name: held
spec:
  selector:
    matchLabels:
      pool: workers
  image: busybox
  version: "2.0"
  strategy:
    maxUnavailable: 1
    maxAttempts: 1
  timeouts:
    checks: 2s
  preChecks:
  - name: never
    expression: machine.status.phase == "Upgraded"
`)
	g.Eventually(func() string {
		return get("mup", "held", "-o", "jsonpath={.status.phase}")
	}).WithTimeout(wait).Should(Equal("Failed"))
	ustatus := ok("upgrade", "status", "held")
	t.Logf("converge upgrade status held:\n%s", ustatus)
	g.Expect(ustatus).To(ContainSubstring("MachineUpgrade verbs/held: Failed to busybox 2.0"))
	g.Expect(ustatus).To(ContainSubstring("ChecksFailed"))
	g.Expect(ustatus).To(MatchRegexp(`(?m)^PreChecks\s+Failed\s+1\s`))
	g.Expect(ustatus).To(ContainSubstring("check never is false for Machine worker-1"), "the failed check and Machine are named")
	logs := ok("upgrade", "logs", "held")
	t.Logf("converge upgrade logs held:\n%s", logs)
	g.Expect(logs).To(Equal("MachineUpgrade verbs/held has selected no Machine yet\n"), "Machines are taken on after the pre-checks")

	g.Expect(ok("upgrade", "retry", "held")).To(Equal("machineupgrade.upgrade.converge.dev/held retry requested\n"))
	g.Eventually(func() string {
		return get("mup", "held", "-o", "jsonpath={.status.lastHandledRetry}")
	}).WithTimeout(wait).ShouldNot(BeEmpty())
	g.Expect(get("mup", "held", "-o", "jsonpath={.status.lastHandledRetry}")).To(Equal(
		get("mup", "held", "-o", `jsonpath={.metadata.annotations.upgrade\.converge\.dev/retry}`)))
	g.Eventually(func() string { return ok("upgrade", "status", "held") }).WithTimeout(wait).Should(ContainSubstring("Retrying PreChecks"))

	g.Expect(ok("upgrade", "pause", "held")).To(Equal("machineupgrade.upgrade.converge.dev/held paused\n"))
	g.Expect(get("mup", "held", "-o", "jsonpath={.spec.paused}")).To(Equal("true"))
	g.Expect(ok("upgrade", "resume", "held")).To(Equal("machineupgrade.upgrade.converge.dev/held resumed\n"))
	g.Expect(get("mup", "held", "-o", "jsonpath={.spec.paused}")).To(Equal("false"))

	g.Expect(ok("upgrade", "skip", "held", "worker-1", "disk on order")).To(Equal("machineupgrade.upgrade.converge.dev/held skip worker-1 requested\n"))
	g.Expect(get("mup", "held", "-o", `jsonpath={.metadata.annotations.skip\.upgrade\.converge\.dev/worker-1}`)).To(Equal("disk on order"))

	g.Expect(ok("upgrade", "abort", "held")).To(Equal("machineupgrade.upgrade.converge.dev/held abort requested\n"))
	g.Expect(get("mup", "held", "-o", "jsonpath={.spec.abort}")).To(Equal("true"))
	g.Eventually(func() string {
		return get("mup", "held", "-o", "jsonpath={.status.phase}")
	}).WithTimeout(wait).Should(Equal("Aborted"))
	g.Expect(get("machine", "worker-1", "-o", "jsonpath={.spec.version}")).To(Equal("1.0"), "the aborted upgrade touched no Machine")
}

// The images of machineConsole: each is the busybox test image whose init
// prints qemu.ImageMarker and the image's name on the serial console.
const consoleImageA, consoleImageB = "console-a", "console-b"

// consoleImages builds the test image store of machineConsole (the busybox
// image, cached across runs, and two marked images made from it) and
// returns its directory, or "" when QEMU or the image tools are missing
// outside CI (under CI=true that fails the test).
func consoleImages(t *testing.T) string {
	t.Helper()
	dir, err := qemu.TestImageDir()
	if err == nil {
		_, err = exec.LookPath("qemu-system-x86_64")
	}
	if err == nil {
		err = qemu.BuildBusyboxImage(t.Context(), dir, "busybox")
	}
	for _, name := range []string{consoleImageA, consoleImageB} {
		if err == nil {
			err = qemu.BuildMarkedImage(t.Context(), dir, "busybox", name)
		}
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the QEMU images of `converge machine console`: %v", err)
		}
		t.Logf("*** SKIPPING the success path of `converge machine console`: %v ***", err)
		return ""
	}
	return dir
}

// machineConsole drives `converge machine console` on two real QEMU VMs
// booted by `converge up` from two images whose init each prints its own
// name: the verb prints the named Machine's serial console (the kernel's
// boot and init's marker) and not the other one's.
func machineConsole(t *testing.T, cv func(args ...string) (string, int),
	get func(args ...string) string, apply func(yaml string)) {
	g := NewWithT(t)
	const wait = 3 * time.Minute
	vm := func(name, image string) string {
		return `apiVersion: infrastructure.converge.dev/v1alpha1
kind: QemuMachine
metadata:
  name: ` + name + `
spec:
  image: ` + image + `
---
apiVersion: machine.converge.dev/v1alpha1
kind: Machine
metadata:
  name: ` + name + `
spec:
  image: ` + image + `
  infrastructureRef:
    apiVersion: infrastructure.converge.dev/v1alpha1
    kind: QemuMachine
    name: ` + name + `
  networkInterfaces:
  - name: eth0
    network: lan
`
	}
	apply(vm("vm-a", consoleImageA) + "---\n" + vm("vm-b", consoleImageB))
	for _, c := range []struct{ name, image, other string }{
		{"vm-a", consoleImageA, consoleImageB},
		{"vm-b", consoleImageB, consoleImageA},
	} {
		g.Eventually(func() string {
			return get("machine", c.name, "-o", "jsonpath={.status.consoleLog}")
		}).WithTimeout(wait).ShouldNot(BeEmpty(), "machine %s publishes its console", c.name)
		var console string
		g.Eventually(func(g Gomega) {
			out, code := cv("machine", "console", c.name)
			g.Expect(code).To(Equal(0), out)
			g.Expect(out).To(ContainSubstring(qemu.ImageMarker + " " + c.image))
			console = out
		}).WithTimeout(wait).WithPolling(time.Second).Should(Succeed(), "the console of %s shows its init", c.name)
		t.Logf("converge machine console %s (end):\n%s", c.name, tail(console, 5))
		g.Expect(console).To(ContainSubstring(qemu.InitMarker))
		g.Expect(console).NotTo(ContainSubstring(qemu.ImageMarker+" "+c.other), "not the other machine's console")
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
