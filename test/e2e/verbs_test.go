package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/testenv"
)

// run runs the built converge binary with args and returns its combined
// output and exit code. Every verb is given --kubeconfig explicitly (and no
// KUBECONFIG), as a user on another machine would.
func (e *env) run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(e.converge, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	cmd.Dir = t.TempDir() // no .converge/kubeconfig to fall back on
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("running converge %v: %v", args, err)
		return "", -1
	}
}

// TestVerbsThroughTheBinary drives the user verbs through the built binary
// against `converge up`: a rollout walked with status, history, undo, pause
// and resume, then each verb's error exits — a missing object, a bad flag, a
// wrong argument count, a refused action — each with one line a person can
// act on, exit code 1 and never a stack trace.
func TestVerbsThroughTheBinary(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	images := consoleImages(t)
	// The Sync verbs use a file:// repository under the temporary
	// directory, outside the directory `converge up` starts in.
	args := []string{"--git-file-roots", os.TempDir()}
	if images != "" {
		args = append(args, "--machine-image-dir", images)
		t.Cleanup(func() { _ = (&qemu.Host{StateDir: filepath.Join(e.dataDir, "machines")}).StopAll() })
	}
	p := e.start(t, args...)
	p.waitReady(t)
	kc := filepath.Join(e.dataDir, "kubeconfig")
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())

	out, err := e.kubectl(t, "create", "namespace", "verbs")
	g.Expect(err).NotTo(HaveOccurred(), out)
	out, err = e.kubectl(t, "-n", "verbs", "apply", "-f", filepath.Join(root, "config/samples/workloads_v1alpha1_basicdeployment.yaml"))
	g.Expect(err).NotTo(HaveOccurred(), out)
	cv := func(args ...string) (string, int) {
		return e.run(t, append(args, "--kubeconfig", kc, "-n", "verbs")...)
	}
	ok := func(args ...string) string {
		t.Helper()
		out, code := cv(args...)
		g.Expect(code).To(Equal(0), "converge %v:\n%s", args, out)
		return out
	}
	fails := func(want string, args ...string) {
		t.Helper()
		out, code := cv(args...)
		g.Expect(code).To(Equal(1), "converge %v should fail:\n%s", args, out)
		g.Expect(out).To(ContainSubstring(want), "converge %v", args)
		g.Expect(out).To(HavePrefix("converge: "), "one line for people, not usage text: %s", out)
		g.Expect(out).NotTo(ContainSubstring("goroutine "))
	}

	// A rollout, as kubectl rollout walks a Deployment.
	g.Expect(ok("rollout", "status", "bd/web", "--timeout", "2m")).To(ContainSubstring("basicdeployment/web successfully rolled out"))
	out, err = e.kubectl(t, "-n", "verbs", "patch", "bd", "web", "--type", "merge", "-p",
		`{"metadata":{"annotations":{"kubernetes.io/change-cause":"nginx 1.28"}},"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.28"}]}}}}`)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(ok("rollout", "status", "basicdeployment/web", "--timeout", "2m")).To(ContainSubstring("successfully rolled out"))
	hist := ok("rollout", "history", "web")
	g.Expect(hist).To(ContainSubstring("REVISION  CHANGE-CAUSE"))
	g.Expect(hist).To(MatchRegexp(`(?m)^1\s+nginx 1\.27$`))
	g.Expect(hist).To(MatchRegexp(`(?m)^2\s+nginx 1\.28$`))
	g.Expect(ok("rollout", "history", "bd/web", "--revision", "1")).To(ContainSubstring("Image:\tnginx:1.27"))
	fails("unable to find the specified revision 99", "rollout", "undo", "bd/web", "--to-revision", "99")
	g.Expect(ok("rollout", "undo", "bd/web")).To(ContainSubstring("basicdeployment.workloads.converge.dev/web rolled back to revision 1"))
	image, err := e.kubectl(t, "-n", "verbs", "get", "bd", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
	g.Expect(err).NotTo(HaveOccurred(), image)
	g.Expect(image).To(Equal("nginx:1.27"), "undo wrote the previous template")
	g.Expect(ok("rollout", "status", "bd/web", "--timeout", "2m")).To(ContainSubstring("successfully rolled out"))

	ok("rollout", "pause", "bd/web")
	paused, err := e.kubectl(t, "-n", "verbs", "get", "bd", "web", "-o", "jsonpath={.spec.paused}")
	g.Expect(err).NotTo(HaveOccurred(), paused)
	g.Expect(paused).To(Equal("true"))
	fails("basicdeployment/web is already paused", "rollout", "pause", "bd/web")
	fails("is paused; run `converge rollout resume` first", "rollout", "undo", "bd/web")
	ok("rollout", "resume", "bd/web")
	fails("basicdeployment/web is not paused", "rollout", "resume", "bd/web")

	// Error exits of each verb family.
	fails("not found", "rollout", "status", "bd/missing", "--timeout", "5s")
	fails("unknown flag: --bogus", "rollout", "status", "bd/web", "--bogus")
	fails("accepts between 1 and 2 arg(s), received 0", "rollout", "status")
	fails("not found", "reconcile", "sync", "missing")
	fails("not found", "sync", "approve-prune", "missing")
	fails("not found", "diff", "sync", "missing")
	fails("not found", "cert", "status", "missing")
	fails("not found", "machine", "power", "off", "missing")
	fails("want KIND/NAME, for example", "reconcile", "sync")
	fails("accepts between 1 and 2 arg(s), received 0", "reconcile")
	g.Expect(ok("machine", "list")).NotTo(ContainSubstring("error"))

	// A kubeconfig that does not exist is named.
	out, code := e.run(t, "rollout", "status", "bd/web", "--kubeconfig", filepath.Join(t.TempDir(), "nope"), "-n", "verbs")
	g.Expect(code).To(Equal(1), out)
	g.Expect(out).To(ContainSubstring("nope"))
	g.Expect(strings.Count(strings.TrimSpace(out), "\n")).To(BeNumerically("<", 3), "a short message: %s", out)

	out, code = e.run(t, "version")
	g.Expect(code).To(Equal(0), out)
	g.Expect(out).NotTo(BeEmpty())

	get := func(args ...string) string {
		t.Helper()
		out, err := e.kubectl(t, append([]string{"-n", "verbs", "get"}, args...)...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		return out
	}
	apply := func(yaml string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "obj.yaml")
		g.Expect(os.WriteFile(f, []byte(yaml), 0o600)).To(Succeed())
		out, err := e.kubectl(t, "-n", "verbs", "apply", "-f", f)
		g.Expect(err).NotTo(HaveOccurred(), out)
	}
	verbsSuccess(t, e, root, cv, ok, get, apply)
	if images != "" {
		machineConsole(t, cv, get, apply)
	}
}
