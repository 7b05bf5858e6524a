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
	"os"
	"path/filepath"
	"strings"
	"time"

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
}

// Platform is a running local platform.
type Platform struct {
	// ControlPlane is the running control plane.
	ControlPlane *localcp.ControlPlane
	// Converge is the running manager.
	Converge *setup.Converge
	// StartupTime is how long it took to become ready.
	StartupTime time.Duration
}

// Run starts everything, reports when ready, and blocks until ctx is done or
// something fails; then it stops the manager and every component.
func Run(ctx context.Context, o Options) (retErr error) {
	t0 := time.Now()
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	step := func(format string, args ...any) {
		_, _ = fmt.Fprintf(out, "  [%5.1fs] %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	o.ControlPlane.Progress = step
	cp, err := localcp.Start(ctx, o.ControlPlane)
	if err != nil {
		return err
	}
	defer func() {
		step("stopping components")
		retErr = errors.Join(retErr, cp.Stop())
	}()
	cfg, err := cp.RESTConfig()
	if err != nil {
		return err
	}

	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return err
	}
	if err := install.ApplyCRDs(ctx, c, 0); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	step("CRDs installed")
	o.Manager.Webhook = setup.LocalWebhookOptions(filepath.Join(cp.DataDir(), "webhook"), o.WebhookPort)
	step("starting converge manager")
	cv, err := setup.New(ctx, cfg, o.Manager)
	if err != nil {
		return err
	}
	ca, err := cv.CABundle(ctx)
	if err != nil {
		return err
	}
	if err := install.ApplyWebhooks(ctx, c, setup.LocalWebhookURL(o.WebhookPort), ca); err != nil {
		return fmt.Errorf("installing webhook configurations: %w", err)
	}

	mctx, stopManager := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- cv.Manager.Start(mctx) }()
	defer func() {
		stopManager()
		if err := <-mgrDone; err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("manager: %w", err))
		}
	}()
	if err := waitReady(ctx, cp, cv, mgrDone); err != nil {
		return err
	}
	p := &Platform{ControlPlane: cp, Converge: cv, StartupTime: time.Since(t0)}
	printSummary(out, p, o)
	if o.Ready != nil {
		o.Ready(p)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-cp.Failed():
		return err
	case err := <-mgrDone:
		mgrDone <- err
		return fmt.Errorf("manager stopped: %w", err)
	}
}

// waitReady waits for the fake node, the manager's caches and its webhook
// server.
func waitReady(ctx context.Context, cp *localcp.ControlPlane, cv *setup.Converge, mgrDone chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cp.WaitNodesReady(ctx); err != nil {
		return err
	}
	checker := cv.Manager.GetWebhookServer().StartedChecker()
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
		if checker(nil) == nil && cv.Manager.GetCache().WaitForCacheSync(ctx) {
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
	_, _ = fmt.Fprintf(out, "  %-24s %s (data in %s)\n", "API server", cp.URL(), cp.DataDir())
	kubectl := "kubectl"
	if _, err := os.Stat(filepath.Join(o.ControlPlane.BinDir, "kubectl")); err == nil {
		kubectl = filepath.Join(o.ControlPlane.BinDir, "kubectl")
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, kubectl); err == nil && !strings.HasPrefix(rel, "..") {
				kubectl = rel
			}
		}
	}
	_, _ = fmt.Fprintf(out, "\nUse it from another terminal:\n  export KUBECONFIG=%s\n  %s get nodes\n  %s create deployment web --image=nginx --replicas=3\n\nStop with Ctrl-C; a later `converge up` keeps every object.\n",
		kc, kubectl, kubectl)
}

