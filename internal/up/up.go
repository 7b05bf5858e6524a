// Package up runs Converge locally: it starts the local control plane
// (internal/localcp), installs the CRDs and webhook configurations, and runs
// the manager built by internal/setup in the same process, until the context
// ends or a component fails.
package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/install"
	"github.com/converge-dev/converge/internal/localcp"
	"github.com/converge-dev/converge/internal/setup"
)

// Options configure a local run.
type Options struct {
	// ControlPlane configures the local control plane.
	ControlPlane localcp.Config
	// Manager configures the manager; its webhook options are replaced by
	// local ones on WebhookPort.
	Manager setup.Options
	// WebhookPort is the webhook server's port on 127.0.0.1.
	WebhookPort int
	// Out receives progress and the summary.
	Out io.Writer
	// Ready, if set, is called once everything is ready.
	Ready func(*Platform)
	// ReadyBeforeCacheSync reports ready once the webhooks answer and the
	// manager is leader, without waiting for every controller's informers
	// to sync (they keep syncing; a webhook's cached read waits for its
	// own). `converge up` sets it; test harnesses, which count on synced
	// caches, leave it off.
	ReadyBeforeCacheSync bool
	// LBPool is the local load balancer's address pool (CIDR or range),
	// served by an agent in this process with the userspace data plane:
	// loopback addresses reach Services from this machine without root.
	// Empty: no local load balancer.
	LBPool string
	// UIAddress is where the live graph (`converge ui`'s page, for
	// namespace UINamespace) is served, on loopback; port 0 picks a free
	// one. Empty or "0": not served.
	UIAddress string
}

// Platform is a running local platform.
type Platform struct {
	// ControlPlane is the running control plane.
	ControlPlane *localcp.ControlPlane
	// Converge is the running manager.
	Converge *setup.Converge
	// StartupTime is how long it took to become ready.
	StartupTime time.Duration
	// UIURL is the live graph's address, token included; empty when not
	// served.
	UIURL string

	stopManager context.CancelFunc
	stopLB      func()
	stopUI      func()
	mgrDone     chan error
	mgrErr      error
	mgrStopped  bool
	step        func(string, ...any)
}

// Run starts everything, reports when ready, and blocks until ctx is done or
// something fails; then it stops the manager and every component.
func Run(ctx context.Context, o Options) (retErr error) {
	p, err := Start(ctx, o)
	if err != nil {
		return err
	}
	defer func() { retErr = errors.Join(retErr, p.Stop()) }()
	printSummary(o.Out, p, o)
	if o.Ready != nil {
		o.Ready(p)
	}
	return p.Wait(ctx)
}

// Start starts the control plane, installs the CRDs and webhooks, and starts
// the manager; it returns once all are ready. On error everything started is
// stopped again.
func Start(ctx context.Context, o Options) (_ *Platform, retErr error) {
	t0 := time.Now()
	if o.Out == nil {
		o.Out = io.Discard
	}
	// step may be called from the control plane's parallel start-up steps.
	var stepMu sync.Mutex
	step := func(format string, args ...any) {
		stepMu.Lock()
		defer stepMu.Unlock()
		_, _ = fmt.Fprintf(o.Out, "  [%5.1fs] %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	o.ControlPlane.Progress = step
	if err := checkManagerPorts(o); err != nil {
		return nil, err
	}
	o.ControlPlane.BeforeControllers = func(ctx context.Context, cfg *rest.Config) error {
		c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
		if err != nil {
			return err
		}
		if err := install.ApplyCRDs(ctx, c, 0); err != nil {
			return fmt.Errorf("installing CRDs: %w", err)
		}
		step("CRDs installed")
		return nil
	}
	cp, err := localcp.Start(ctx, o.ControlPlane)
	if err != nil {
		return nil, err
	}
	p := &Platform{ControlPlane: cp, step: step, stopManager: func() {}, stopLB: func() {}, stopUI: func() {}}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, p.Stop())
		}
	}()
	cfg, err := cp.RESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, err
	}
	// The manager's namespace of local mode: the BMC CA Secret lives there.
	caNS := o.Manager.BMC.CASecretKey().Namespace
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: caNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", caNS, err)
	}
	o.Manager.Webhook = setup.LocalWebhookOptions(filepath.Join(cp.DataDir(), "webhook"), o.WebhookPort)
	if o.Manager.GitOps.CacheDir == "" {
		// Fetched git revisions survive a restart of `converge up`.
		o.Manager.GitOps.CacheDir = filepath.Join(cp.DataDir(), "gitops")
	}
	step("starting converge manager")
	cv, err := setup.New(ctx, cfg, o.Manager)
	if err != nil {
		return nil, err
	}
	p.Converge = cv
	ca, err := cv.CABundle(ctx)
	if err != nil {
		return nil, err
	}
	step("converge manager built")
	// The manager outlives ctx's deadline but not Stop.
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.stopManager = cancel
	p.mgrDone = make(chan error, 1)
	go func() { p.mgrDone <- cv.Manager.Start(mctx) }()
	// The webhook configurations go in while the manager's caches sync;
	// "up" waits for both.
	webhooks := make(chan error, 1)
	go func() {
		err := install.ApplyWebhooks(ctx, c, setup.LocalWebhookURL(o.WebhookPort), ca)
		if err == nil {
			step("webhook configurations installed")
		}
		webhooks <- err
	}()
	readyErr := waitReady(ctx, cp, cv, p.mgrDone, !o.ReadyBeforeCacheSync, step)
	if err := <-webhooks; err != nil {
		return nil, fmt.Errorf("installing webhook configurations: %w", err)
	}
	if readyErr != nil {
		return nil, readyErr
	}
	if o.LBPool != "" {
		if err := p.startLoadBalancer(ctx, c, cfg, o.LBPool); err != nil {
			return nil, err
		}
		step("load balancer: userspace, pool %s", o.LBPool)
	}
	if o.UIAddress != "" && o.UIAddress != "0" {
		if err := p.startUI(ctx, cfg, o.UIAddress); err != nil {
			return nil, err
		}
	}
	p.StartupTime = time.Since(t0)
	return p, nil
}

// Wait blocks until ctx is done (nil) or a component or the manager fails.
func (p *Platform) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-p.ControlPlane.Failed():
		return err
	case err := <-p.mgrDone:
		p.mgrDone <- err
		return fmt.Errorf("manager stopped: %w", err)
	}
}

// StopManager stops only the manager, leaving the control plane running.
func (p *Platform) StopManager() error {
	if p.mgrStopped || p.mgrDone == nil {
		return p.mgrErr
	}
	p.mgrStopped = true
	p.stopManager()
	p.mgrErr = <-p.mgrDone
	return p.mgrErr
}

// Stop stops the load balancer's agent and the manager, then every
// component.
func (p *Platform) Stop() error {
	p.stopUI()
	p.stopLB()
	mgrErr := p.StopManager()
	if mgrErr != nil {
		mgrErr = fmt.Errorf("manager: %w", mgrErr)
	}
	p.step("stopping components")
	return errors.Join(mgrErr, p.ControlPlane.Stop())
}

// waitReady waits for the fake node, the manager's leadership, its webhook
// server and, if caches, its caches, telling step when each is done.
func waitReady(ctx context.Context, cp *localcp.ControlPlane, cv *setup.Converge, mgrDone chan error, caches bool, step func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cp.WaitNodesReady(ctx); err != nil {
		return err
	}
	step("fake node(s) ready")
	select {
	case <-cv.Manager.Elected():
	case err := <-mgrDone:
		mgrDone <- err
		return fmt.Errorf("manager stopped while starting: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("waiting for the manager to become leader: %w", ctx.Err())
	}
	checker := cv.Manager.GetWebhookServer().StartedChecker()
	webhooksTold := false
	for {
		select {
		case err := <-mgrDone:
			mgrDone <- err
			return fmt.Errorf("manager stopped while starting: %w", err)
		case err := <-cp.Failed():
			return err
		case <-ctx.Done():
			return fmt.Errorf("waiting for the manager: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if checker(nil) != nil {
			continue
		}
		if !webhooksTold {
			step("manager is leader, webhook server answering")
			webhooksTold = true
		}
		if !caches {
			return nil
		}
		if cv.Manager.GetCache().WaitForCacheSync(ctx) {
			step("manager caches synced")
			return nil
		}
	}
}

func printSummary(out io.Writer, p *Platform, o Options) {
	cp := p.ControlPlane
	kc := cp.KubeconfigPath()
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, kc); err == nil && !strings.HasPrefix(rel, "..") {
			kc = rel
		}
	}
	pids := cp.Pids()
	_, _ = fmt.Fprintf(out, "\nConverge is up (ready in %.1fs). Running:\n", p.StartupTime.Seconds())
	for _, name := range cp.Components() {
		_, _ = fmt.Fprintf(out, "  %-24s pid %-7d log %s\n", name, pids[name], filepath.Join(cp.LogDir(), name+".log"))
	}
	_, _ = fmt.Fprintf(out, "  %-24s in this process; controllers: %s; webhooks: %s\n", "converge manager",
		strings.Join(p.Converge.Enabled, ", "), setup.LocalWebhookURL(o.WebhookPort))
	if o.LBPool != "" {
		_, _ = fmt.Fprintf(out, "  %-24s addresses from %s (IPAddressPool %s), served in this process (userspace)\n", "load balancer", o.LBPool, LBPoolName)
	}
	if o.Manager.Receiver.Enabled() {
		_, _ = fmt.Fprintf(out, "  %-24s http://%s/hook/gitrepository/<namespace>/<name>\n", "push webhooks", o.Manager.Receiver.BindAddress)
	}
	_, _ = fmt.Fprintf(out, "  %-24s %s (data in %s)\n", "API server", cp.URL(), cp.DataDir())
	if p.UIURL != "" {
		_, _ = fmt.Fprintf(out, "  %-24s %s (namespace %s, as the kubeconfig below)\n", "live graph (ui)", p.UIURL, UINamespace)
	}
	kubectl := "kubectl"
	if _, err := os.Stat(filepath.Join(o.ControlPlane.BinDir, "kubectl")); err == nil {
		kubectl = filepath.Join(o.ControlPlane.BinDir, "kubectl")
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, kubectl); err == nil && !strings.HasPrefix(rel, "..") {
				kubectl = rel
			}
		}
	}
	converge := "converge"
	if exe, err := os.Executable(); err == nil {
		converge = exe
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
				converge = rel
			}
		}
	}
	uiHint := "(the same graph, live in a browser)"
	if p.UIURL != "" {
		uiHint = "(another namespace or one object, live in a browser)"
	}
	_, _ = fmt.Fprintf(out, "\nUse it from another terminal:\n  export KUBECONFIG=%s\n  %s get nodes\n  %s create deployment web --image=nginx --replicas=3\n"+
		"\nWhy is something not ready?\n  %s -n NAMESPACE why KIND/NAME\n  %s -n NAMESPACE ui [KIND/NAME]   %s\n"+
		"\nStop with Ctrl-C; a later `converge up` keeps every object.\n",
		kc, kubectl, kubectl, converge, converge, uiHint)
}

// checkManagerPorts refuses to start when a port the manager will listen on
// is taken, before minutes of control-plane start-up are spent.
func checkManagerPorts(o Options) error {
	if err := localcp.CheckPortFree(o.WebhookPort, "the webhook server", "--webhook-port"); err != nil {
		return err
	}
	for _, a := range []struct{ addr, what, flag string }{
		{o.Manager.MetricsBindAddress, "the metrics endpoint", "--metrics-bind-address"},
		{o.Manager.HealthProbeBindAddress, "the health probes", "--health-probe-bind-address"},
		{o.Manager.Receiver.BindAddress, "the push webhook receiver", "--receiver-bind-address"},
		{o.Manager.PKI.ACMEHTTP01BindAddress, "the ACME HTTP-01 answers", "--acme-http01-bind-address"},
	} {
		if a.addr == "" || a.addr == "0" {
			continue
		}
		_, port, err := net.SplitHostPort(a.addr)
		if err != nil {
			return fmt.Errorf("%s %q: %w", a.flag, a.addr, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("%s %q: %w", a.flag, a.addr, err)
		}
		if n == 0 {
			continue
		}
		if err := localcp.CheckPortFree(n, a.what, a.flag); err != nil {
			return err
		}
	}
	return nil
}
