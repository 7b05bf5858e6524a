// Package replicas runs `converge run --leader-elect` replicas as separate
// processes against a test control plane, each behind its own counting
// reverse proxy to the API server, so that the requests (and the writes) of
// each replica are counted apart. The high-availability tests and
// bench/failover use it to signal real processes (SIGKILL, SIGTERM,
// SIGSTOP/SIGCONT) and to check what each one sent; bench/gitops runs one
// manager without a proxy (StartDirect) to time it and read its memory.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/leaderfence"
)

// Request is one request a replica sent.
type Request struct {
	// Time is when the proxy received it.
	Time time.Time
	// Method and Path are the HTTP method and URL path.
	Method, Path string
	// FenceChecked is when the write passed the replica's leader fence (its
	// leaderfence.FenceCheckedHeader); zero when it carried none.
	FenceChecked time.Time
}

// IsWrite reports whether the request changes state.
func (r Request) IsWrite() bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// IsLease reports whether the request is about a coordination Lease.
func (r Request) IsLease() bool { return strings.Contains(r.Path, "/apis/coordination.k8s.io/") }

// IsEvent reports whether the request writes an Event.
func (r Request) IsEvent() bool {
	return strings.HasSuffix(r.Path, "/events") || strings.Contains(r.Path, "/events/")
}

// Proxy is a reverse proxy to the API server that records every request.
type Proxy struct {
	// URL is the proxy's plain-HTTP address (loopback).
	URL string

	srv *http.Server
	mu  gosync.Mutex
	log []Request
}

// StartProxy listens on a loopback port and forwards to the API server of
// cfg with cfg's credentials.
func StartProxy(cfg *rest.Config) (*Proxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "http://" + ln.Addr().String()}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     rt,
		FlushInterval: -1, // watches stream
	}
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		checked, _ := time.Parse(time.RFC3339Nano, r.Header.Get(leaderfence.FenceCheckedHeader))
		p.log = append(p.log, Request{Time: time.Now(), Method: r.Method, Path: r.URL.Path, FenceChecked: checked})
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Requests returns the requests received at or after since that keep
// says to keep (nil keeps all).
func (p *Proxy) Requests(since time.Time, keep func(Request) bool) []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Request
	for _, r := range p.log {
		if !r.Time.Before(since) && (keep == nil || keep(r)) {
			out = append(out, r)
		}
	}
	return out
}

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// ObjectWrite keeps writes other than Lease updates and Events: what a
// replica that is not the leader must never send.
func ObjectWrite(r Request) bool { return r.IsWrite() && !r.IsLease() && !r.IsEvent() }

// Replica is one `converge run` process behind its proxy.
type Replica struct {
	// Name names the replica in logs.
	Name string
	// Proxy counts its requests (nil after StartDirect).
	Proxy *Proxy
	// Cmd is the running process.
	Cmd *exec.Cmd

	done chan struct{}
	err  error
}

// BuildTags are the build tags of the converge binary, as `make build` and
// the Dockerfile pass them: kustomize_disable_go_plugin_support leaves out
// kustomize's Go-plugin loader (renders never load plugins), whose
// "plugin" import makes the linker export every symbol; the dynamic
// symbol table it adds (about 20 MB) is read by the dynamic loader at
// start and stays resident (docs/architecture.md, "Memory").
const BuildTags = "kustomize_disable_go_plugin_support"

// ExeEnv names the environment variable that points at a converge binary
// already built from this tree: `make test` sets it to bin/converge right
// after `make build`, so that the suites that run the binary (e2e, ha, ui,
// why, the agents) share that one build instead of each compiling and
// linking its own (on a cold 2-core machine those parallel builds compiled
// the same packages side by side). Unset, Build compiles.
const ExeEnv = "CONVERGE_EXE"

// Build compiles the converge binary into dir (from the repository root
// root) as `make build` does and returns its path. With ExeEnv set, it puts
// a copy of (a hard link to) that binary in dir instead. Builds of
// several test processes at once take turns (a file lock), so that the
// second finds the build cache filled by the first and only links.
func Build(ctx context.Context, root, dir string) (string, error) {
	exe := filepath.Join(dir, "converge")
	if prebuilt := os.Getenv(ExeEnv); prebuilt != "" {
		if err := linkOrCopy(prebuilt, exe); err != nil {
			return "", fmt.Errorf("using the converge binary %s=%s: %w", ExeEnv, prebuilt, err)
		}
		return exe, nil
	}
	unlock, err := lockBuilds()
	if err != nil {
		return "", err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", BuildTags, "-o", exe, "./cmd/converge")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building converge: %w\n%s", err, out)
	}
	return exe, nil
}

// linkOrCopy makes dst the file src: a hard link when both are on one file
// system, else a copy (executable).
func linkOrCopy(src, dst string) error {
	info, err := os.Stat(src) //nolint:gosec // src is the developer's own CONVERGE_EXE
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src) //nolint:gosec // as above
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}

// lockBuilds takes the machine-wide lock of Build's go build (a file in the
// temporary directory) and returns its release.
func lockBuilds() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "converge-build.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("taking the build lock: %w", err)
	}
	return func() { _ = f.Close() }, nil
}

// Start runs exe run with args, its API requests through a new proxy to
// cfg's server (its kubeconfig is written to dir). Its output goes to
// dir/<name>.log.
func Start(cfg *rest.Config, exe, dir, name string, args ...string) (*Replica, error) {
	return StartVerb(cfg, exe, dir, name, []string{"run"}, args...)
}

// StartVerb is Start for another verb of the binary than `run` (e.g.
// `agent machines`): exe verb... --kubeconfig <file> args...
func StartVerb(cfg *rest.Config, exe, dir, name string, verb []string, args ...string) (*Replica, error) {
	p, err := StartProxy(cfg)
	if err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, name+".kubeconfig")
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, p.URL)
	if err := os.WriteFile(kc, []byte(kubeconfig), 0o600); err != nil {
		_ = p.Close()
		return nil, err
	}
	r, err := startArgv(exe, dir, name, append(append(append([]string{}, verb...), "--kubeconfig", kc), args...))
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	r.Proxy = p
	return r, nil
}

// StartDirect runs exe run with args against the cluster of kubeconfig,
// with no proxy in between (Proxy is nil): as a user runs it, e.g. for a
// benchmark that times it or reads its memory. Its output goes to
// dir/<name>.log.
func StartDirect(kubeconfig, exe, dir, name string, args ...string) (*Replica, error) {
	return startArgv(exe, dir, name, append([]string{"run", "--kubeconfig", kubeconfig}, args...))
}

func startArgv(exe, dir, name string, argv []string) (*Replica, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A replica dies with the process that started it (a test binary killed
	// by its timeout leaves no manager running against a gone API server).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, err
	}
	r := &Replica{Name: name, Cmd: cmd, done: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		_ = logf.Close()
		close(r.done)
	}()
	return r, nil
}

// Pid is the process id.
func (r *Replica) Pid() int { return r.Cmd.Process.Pid }

// Signal sends sig to the process.
func (r *Replica) Signal(sig syscall.Signal) error { return r.Cmd.Process.Signal(sig) }

// Exited is closed when the process has exited.
func (r *Replica) Exited() <-chan struct{} { return r.done }

// Stop kills the process (if it runs), waits for it and closes the proxy.
func (r *Replica) Stop() error {
	select {
	case <-r.done:
	default:
		_ = r.Cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die
		_ = r.Cmd.Process.Kill()
		<-r.done
	}
	if r.Proxy == nil {
		return nil
	}
	return r.Proxy.Close()
}

// Holds reports whether holder (a Lease's holderIdentity) is this
// replica: converge's identities end in _<pid>_<uuid>.
func (r *Replica) Holds(holder string) bool {
	return strings.Contains(holder, "_"+strconv.Itoa(r.Pid())+"_")
}

// Holder reads the holder of Lease ns/name.
func Holder(ctx context.Context, c client.Client, ns, name string) (string, error) {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// Leader waits until one of rs holds Lease ns/name and returns it.
func Leader(ctx context.Context, c client.Client, ns, name string, timeout time.Duration, rs ...*Replica) (*Replica, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if h, err := Holder(ctx, c, ns, name); err == nil {
			for _, r := range rs {
				if r.Holds(h) {
					return r, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, errors.New("no replica took the Lease " + ns + "/" + name + " in time")
}
