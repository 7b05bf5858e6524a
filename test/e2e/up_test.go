package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/replicas"
	"github.com/converge-dev/converge/internal/testenv"
)

// upProcess is a running `converge up`.
type upProcess struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	out     bytes.Buffer
	ready   chan struct{}
	exited  chan struct{}
	dataDir string
}

func (p *upProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// pids returns the component pids printed in the summary.
func (p *upProcess) pids() map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(p.output(), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "pid" {
			if pid, err := strconv.Atoi(f[2]); err == nil {
				out[f[0]] = pid
			}
		}
	}
	return out
}

type env struct {
	bin, converge, dataDir string
	ports                  []string
}

func setup(t *testing.T) *env {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(bin, "kube-apiserver")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("control-plane binaries missing in %s (CI must run `make tools`)", bin)
		}
		t.Skipf("*** SKIPPING: control-plane binaries missing in %s: run `make tools` ***", bin)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := replicas.Build(t.Context(), root, t.TempDir()) // as `make build` builds it
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for range 4 {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, strconv.Itoa(p))
	}
	// etcd needs two adjacent ports; pick until both are free.
	etcd := ""
	for range 50 {
		p, _ := testenv.FreePort()
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1)); err == nil {
			_ = l.Close()
			etcd = strconv.Itoa(p)
			break
		}
	}
	return &env{bin: bin, converge: exe, dataDir: filepath.Join(t.TempDir(), "data"),
		ports: []string{"--port", ports[0], "--webhook-port", ports[1], "--etcd-port", etcd,
			"--metrics-bind-address", "127.0.0.1:" + ports[2], "--health-probe-bind-address", "0",
			"--receiver-bind-address", "127.0.0.1:" + ports[3]}}
}

func (e *env) start(t *testing.T, extra ...string) *upProcess {
	t.Helper()
	args := append([]string{"up", "--data-dir", e.dataDir, "--bin-dir", e.bin}, e.ports...)
	args = append(args, extra...)
	p := &upProcess{cmd: exec.Command(e.converge, args...), ready: make(chan struct{}), exited: make(chan struct{}), dataDir: e.dataDir}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if strings.HasPrefix(sc.Text(), "Stop with Ctrl-C") {
				once.Do(func() { close(p.ready) })
			}
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *upProcess) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.exited:
		t.Fatalf("converge up exited before it was ready:\n%s", p.output())
	case <-time.After(2 * time.Minute):
		t.Fatalf("converge up not ready after 2 minutes:\n%s", p.output())
	}
}

func (p *upProcess) waitExit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("converge up did not exit within %s:\n%s", within, p.output())
		return -1
	}
}

func (e *env) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.bin, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(e.dataDir, "kubeconfig"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// webhooksAnswerAtOnce checks, right after "Converge is up" and without
// retrying, that the validating webhooks answer: a pool overlapping up's own
// loopback pool is refused by the webhook's overlap check, naming the field
// (with the webhook server not yet answering, the API server would refuse it
// with "failed calling webhook" instead).
func (e *env) webhooksAnswerAtOnce(t *testing.T) {
	t.Helper()
	manifest := filepath.Join(t.TempDir(), "overlap.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: lb.converge.dev/v1alpha1
kind: IPAddressPool
metadata:
  name: overlaps-local-loopback
spec:
  addresses: ["127.240.0.7/32"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := e.kubectl(t, "create", "-f", manifest)
	g := NewWithT(t)
	g.Expect(err).To(HaveOccurred(), "an overlapping pool must be refused: %s", out)
	g.Expect(out).To(ContainSubstring("spec.addresses"))
	g.Expect(out).To(MatchRegexp(`overlaps \S+ of IPAddressPool "local-loopback"`))
}

// tokenOnly runs kubectl authenticated by a bearer token alone (no client
// certificate, which the API server would check first).
func (e *env) tokenOnly(t *testing.T, token string, args ...string) (string, error) {
	t.Helper()
	empty := filepath.Join(t.TempDir(), "empty-kubeconfig")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--kubeconfig", empty, "--server", "https://127.0.0.1:" + e.ports[1],
		"--certificate-authority", filepath.Join(e.dataDir, "pki", "ca.crt"), "--token", token}, args...)
	out, err := exec.Command(filepath.Join(e.bin, "kubectl"), args...).CombinedOutput()
	return string(out), err
}

func alive(pid int) bool {
	// Signal 0 checks existence; a zombie still "exists", so read its state.
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// TestUpLifecycle walks the local platform as a user does: up, a Deployment
// on the fake node, garbage collection, Ctrl-C, a restart that keeps every
// object, and SIGKILL that leaves no process behind.
func TestUpLifecycle(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)

	p := e.start(t)
	p.waitReady(t)
	g.Expect(p.output()).To(ContainSubstring("Converge is up"))
	e.webhooksAnswerAtOnce(t)
	pids := p.pids()
	g.Expect(pids).To(HaveKey("etcd"))
	g.Expect(pids).To(HaveKey("kube-apiserver"))
	g.Expect(pids).To(HaveKey("kube-controller-manager"))
	g.Expect(pids).To(HaveKey("kube-scheduler"))
	g.Expect(pids).To(HaveKey("kwok"))

	out, err := e.kubectl(t, "get", "nodes", "--no-headers")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(MatchRegexp(`kwok-node-0\s+Ready`))

	out, err = e.kubectl(t, "create", "deployment", "web", "--image=nginx", "--replicas=3")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func() string {
		out, _ := e.kubectl(t, "get", "pods", "-l", "app=web", "--field-selector=status.phase=Running", "-o", "name")
		return out
	}).WithTimeout(60 * time.Second).Should(WithTransform(func(s string) int { return len(strings.Fields(s)) }, Equal(3)))

	out, err = e.kubectl(t, "delete", "deployment", "web", "--wait=true")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func() string {
		out, _ := e.kubectl(t, "get", "replicasets,pods", "-l", "app=web", "-o", "name")
		return out
	}).WithTimeout(60*time.Second).Should(BeEmpty(), "the garbage collector removes the ReplicaSet and its Pods")

	// The local load balancer: a loopback pool made by up, and the agent in
	// up's process serving it (it writes LoadBalancerReady; a selector-less
	// Service has no endpoints yet). internal/lbagent's
	// TestUserspaceLocalMode drives traffic through the same data plane.
	out, err = e.kubectl(t, "get", "ipaddresspool", "local-loopback", "-o", "jsonpath={.spec.addresses[0]}")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("127.240.0.0/24"))
	out, err = e.kubectl(t, "create", "service", "loadbalancer", "lb", "--tcp=8000:8000")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func() string {
		out, _ := e.kubectl(t, "get", "service", "lb", "-o", `jsonpath={.status.conditions[?(@.type=="LoadBalancerReady")].message}`)
		return out
	}).WithTimeout(60 * time.Second).Should(MatchRegexp(`address 127\.240\.0\.\d+ announced by node local, but the Service has no ready endpoints`))

	// The "why" hint up prints runs as printed (the binary's path, -n,
	// why KIND/NAME) against this platform.
	var whyHint []string
	for _, line := range strings.Split(p.output(), "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[1] == "-n" && f[3] == "why" {
			whyHint = f
		}
	}
	g.Expect(whyHint).NotTo(BeEmpty(), "up prints how to ask why:\n%s", p.output())
	why := exec.Command(whyHint[0], "-n", "default", "why", "service/lb")
	why.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(e.dataDir, "kubeconfig"))
	whyOut, err := why.CombinedOutput()
	var exit *exec.ExitError
	if err != nil {
		g.Expect(errors.As(err, &exit)).To(BeTrue(), "%s: %v", whyHint[0], err)
	}
	g.Expect(string(whyOut)).To(ContainSubstring("Service/lb"))

	// The live graph up serves: its address (with this run's token) is in
	// the summary; the page lists the namespace's Converge objects and
	// refuses a request without the token.
	var uiURL string
	for _, line := range strings.Split(p.output(), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "live" && f[1] == "graph" {
			uiURL = f[3]
		}
	}
	g.Expect(uiURL).To(MatchRegexp(`^http://127\.0\.0\.1:\d+/\?token=[0-9a-f]{48}$`), "up prints the live graph's address:\n%s", p.output())
	issuer := filepath.Join(t.TempDir(), "issuer.yaml")
	g.Expect(os.WriteFile(issuer, []byte("apiVersion: pki.converge.dev/v1alpha1\nkind: Issuer\nmetadata:\n  name: self\n  namespace: default\nspec:\n  selfSigned: {}\n"), 0o600)).To(Succeed())
	out, err = e.kubectl(t, "apply", "-f", issuer)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func() string {
		resp, err := http.Get(uiURL) //nolint:noctx // a test request on loopback
		if err != nil {
			return err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}).WithTimeout(10*time.Second).Should(And(HavePrefix("200 "), ContainSubstring(`data-kind="Issuer" data-name="self"`)), "the page shows the new object")
	resp, err := http.Get(strings.Split(uiURL, "?")[0]) //nolint:noctx // a test request on loopback
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden), "no token, no page")

	out, err = e.kubectl(t, "create", "configmap", "survivor", "--from-literal=k=v")
	g.Expect(err).NotTo(HaveOccurred(), out)
	kubeconfig, err := os.ReadFile(filepath.Join(e.dataDir, "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	// A service-account token minted now must still be accepted after the
	// restart: the signing key persists.
	out, err = e.kubectl(t, "create", "token", "default", "--duration=1h")
	g.Expect(err).NotTo(HaveOccurred(), out)
	token := strings.TrimSpace(out)

	// Ctrl-C: clean exit, every component gone.
	g.Expect(p.cmd.Process.Signal(os.Interrupt)).To(Succeed())
	g.Expect(p.waitExit(t, 60*time.Second)).To(Equal(0), p.output())
	for name, pid := range pids {
		g.Eventually(func() bool { return alive(pid) }).WithTimeout(5*time.Second).Should(BeFalse(), "%s (pid %d) left behind", name, pid)
	}

	// Restart: same objects, same kubeconfig, old token still valid.
	p2 := e.start(t)
	p2.waitReady(t)
	e.webhooksAnswerAtOnce(t) // a warm start must not announce "up" any earlier
	out, err = e.kubectl(t, "get", "configmap", "survivor", "-o", "jsonpath={.data.k}")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("v"))
	again, err := os.ReadFile(filepath.Join(e.dataDir, "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(kubeconfig), "the kubeconfig written before the restart keeps working")
	out, err = e.tokenOnly(t, token, "get", "--raw", "/api")
	g.Expect(err).NotTo(HaveOccurred(), "a token minted before the restart is accepted: %s", out)
	out, err = e.tokenOnly(t, token+"x", "get", "--raw", "/api")
	g.Expect(err).To(HaveOccurred(), "a forged token is refused, so the check above means something: %s", out)
	g.Expect(out).To(ContainSubstring("Unauthorized"))

	// SIGKILL of converge itself: the children die with it.
	pids = p2.pids()
	g.Expect(pids).To(HaveLen(5))
	g.Expect(p2.cmd.Process.Kill()).To(Succeed())
	<-p2.exited
	for name, pid := range pids {
		g.Eventually(func() bool { return alive(pid) }).WithTimeout(10*time.Second).Should(BeFalse(), "%s (pid %d) orphaned", name, pid)
	}
}

// TestUpClearErrors checks that common mistakes get one actionable line, not
// a stack trace.
func TestUpClearErrors(t *testing.T) {
	e := setup(t)

	t.Run("binaries missing", func(t *testing.T) {
		g := NewWithT(t)
		e2 := *e
		e2.bin = t.TempDir()
		p := e2.start(t)
		g.Expect(p.waitExit(t, 30*time.Second)).To(Equal(1))
		g.Expect(p.output()).To(ContainSubstring("run `make tools`"))
		g.Expect(p.output()).To(ContainSubstring("kube-apiserver"))
		g.Expect(p.output()).NotTo(ContainSubstring("goroutine "))
	})

	t.Run("port in use", func(t *testing.T) {
		g := NewWithT(t)
		l, err := net.Listen("tcp", "127.0.0.1:"+e.ports[1])
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = l.Close() }()
		p := e.start(t)
		g.Expect(p.waitExit(t, 30*time.Second)).To(Equal(1))
		g.Expect(p.output()).To(ContainSubstring(fmt.Sprintf("port %s on 127.0.0.1, needed by kube-apiserver, is in use", e.ports[1])))
	})

	t.Run("incompatible data dir", func(t *testing.T) {
		g := NewWithT(t)
		e2 := *e
		e2.dataDir = t.TempDir()
		g.Expect(os.WriteFile(filepath.Join(e2.dataDir, "converge-data.json"), []byte(`{"format":1,"kubernetes":"v1.30.0"}`), 0o644)).To(Succeed())
		p := e2.start(t)
		g.Expect(p.waitExit(t, 30*time.Second)).To(Equal(1))
		g.Expect(p.output()).To(ContainSubstring("incompatible converge"))
	})
}
