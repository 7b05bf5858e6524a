package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/localcp"
	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/up"
)

func newUpCommand(g *globalFlags) *cobra.Command {
	o := up.Options{
		ControlPlane: localcp.Config{ControllerManager: true, Scheduler: true},
		Manager:      setup.DefaultOptions(),
		// "Converge is up" once the webhooks answer and the manager leads;
		// the controllers' caches finish syncing behind it.
		ReadyBeforeCacheSync: true,
	}
	var verbose bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a local control plane with the Converge manager",
		Long: `Start a real local Kubernetes control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, and kwok faking one Ready node so
that ordinary Pods run), install the Converge CRDs and webhooks, and run the
manager in this process. The data, PKI, logs and kubeconfig live in
--data-dir, so a later 'converge up' keeps every object. Ctrl-C stops all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.ControlPlane.BinDir == "" {
				o.ControlPlane.BinDir = defaultBinDir()
			}
			logDir := filepath.Join(o.ControlPlane.DataDir, "logs")
			if err := os.MkdirAll(logDir, 0o700); err != nil {
				return fmt.Errorf("creating %s: %w", logDir, err)
			}
			var logOut io.Writer = os.Stderr
			if !verbose {
				f, err := os.OpenFile(filepath.Join(logDir, "converge-manager.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
				if err != nil {
					return fmt.Errorf("opening manager log: %w", err)
				}
				defer func() { _ = f.Close() }()
				logOut = f
			}
			if err := setupLogging(g, logOut); err != nil {
				return err
			}
			if o.Manager.BackupDir == "" {
				o.Manager.BackupDir = setup.LocalBackupDir(o.ControlPlane.DataDir)
			}
			state, images := machineoptions.LocalMachineDirs(o.ControlPlane.DataDir)
			if o.Manager.Machines.StateDir == "" {
				o.Manager.Machines.StateDir = state
			}
			if o.Manager.Machines.ImageDir == "" {
				o.Manager.Machines.ImageDir = images
			}
			// VMs run under `converge up` and stop with it: no orphans.
			o.Manager.Machines.StopVMsOnExit = true
			o.Out = cmd.OutOrStdout()
			_, _ = fmt.Fprintf(o.Out, "Starting Converge locally (data: %s)\n", o.ControlPlane.DataDir)
			return up.Run(ctrl.SetupSignalHandler(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ControlPlane.DataDir, "data-dir", ".converge", "directory for etcd data, PKI, logs and the kubeconfig")
	f.StringVar(&o.ControlPlane.BinDir, "bin-dir", "", "directory of the control-plane binaries (default: $CONVERGE_BIN_DIR, ./bin, or beside this executable)")
	f.IntVar(&o.ControlPlane.APIServerPort, "port", 6443, "kube-apiserver port on 127.0.0.1")
	f.IntVar(&o.ControlPlane.EtcdPort, "etcd-port", 2379, "etcd client port on 127.0.0.1 (the peer port is the next one)")
	f.IntVar(&o.ControlPlane.Nodes, "nodes", 1, "number of fake (kwok) nodes")
	f.IntVar(&o.WebhookPort, "webhook-port", 9443, "webhook server port on 127.0.0.1")
	f.StringSliceVar(&o.Manager.Controllers, "controllers", o.Manager.Controllers, "controllers to run: '*', 'name', '-name'")
	f.StringVar(&o.Manager.MetricsBindAddress, "metrics-bind-address", "127.0.0.1:8080", "metrics endpoint address; '0' disables")
	f.StringVar(&o.Manager.HealthProbeBindAddress, "health-probe-bind-address", "127.0.0.1:8081", "address of /healthz and /readyz; '0' disables")
	f.StringVar(&o.Manager.Receiver.BindAddress, "receiver-bind-address", "127.0.0.1:9292", "address of the push webhook receiver (plain HTTP); '0' disables")
	f.StringVar(&o.Manager.BackupDir, "backup-dir", "", "backup store of the backup-before-delete controller (default: <data-dir>/backups)")
	f.DurationVar(&o.Manager.DatabaseObserveInterval, "database-observe-interval", o.Manager.DatabaseObserveInterval, "how often each database server is checked for drift (one snapshot for all its Databases)")
	f.DurationVar(&o.Manager.DatabaseResyncInterval, "database-resync-interval", o.Manager.DatabaseResyncInterval, "how often a Ready Database is fully reconciled (password and extensions checked), ±5 %")
	f.StringVar(&o.LBPool, "lb-pool", up.DefaultLBPool, "LoadBalancer Services get addresses from this pool (created when missing) and are served here by a userspace proxy (no root; ports from 1024 up unless root); '' disables")
	f.BoolVar(&o.Manager.LBDefaultClass, "lb-default-class", o.Manager.LBDefaultClass, "serve LoadBalancer Services that set no spec.loadBalancerClass (Converge's class is converge.dev/lb)")
	f.IntVar(&o.Manager.LBMaxListenersPerNamespace, "lb-max-listeners-per-namespace", o.Manager.LBMaxListenersPerNamespace, "most listeners (ports of LoadBalancer Services holding an address) one namespace may have; 0: no bound")
	f.IntVar(&o.Manager.LBMaxAssignmentsPerPool, "lb-max-assignments-per-pool", o.Manager.LBMaxAssignmentsPerPool, "most assignments (Services holding an address, each sharing one counting) one IPAddressPool may hold; 0: the schema's 65536")
	addBudgetFlags(f, &o.Manager)
	addMachineFlags(f, &o.Manager.Machines)
	addBMCFlags(f, &o.Manager.BMC)
	addPKIFlags(f, &o.Manager, "127.0.0.1:8089")
	// One user on their own machine: the peers listen on loopback, and the
	// tour's GitRepository is a file:// URL of the directory `converge up`
	// starts in.
	var roots []string
	if wd, err := os.Getwd(); err == nil {
		roots = []string{wd}
	}
	addEgressFlags(f, &o.Manager, egress.Loopback, roots)
	f.StringVar(&o.UIAddress, "ui-address", "127.0.0.1:0", "serve the live graph of namespace "+up.UINamespace+" (what `converge ui` serves) here, on loopback; port 0 picks a free one; '0' disables")
	f.BoolVarP(&verbose, "verbose", "v", false, "print the manager's logs here instead of <data-dir>/logs/converge-manager.log")
	// One user, the admin of the local control plane: Syncs without a
	// service account act as the manager unless asked otherwise.
	o.Manager.GitOps.Lockdown = false
	f.BoolVar(&o.Manager.GitOps.Lockdown, "gitops-lockdown", false, "never let a Sync act as the manager (as `converge run` and the chart do); Syncs must then name a service account")
	f.StringVar(&o.Manager.GitOps.DefaultServiceAccount, "gitops-default-service-account", "", "service account (in the Sync's namespace) that Syncs naming none act as")
	o.Manager.SecureMetrics = false // local only, on loopback
	return cmd
}

// defaultBinDir finds the binaries `make tools` built.
func defaultBinDir() string {
	if d := os.Getenv("CONVERGE_BIN_DIR"); d != "" {
		return d
	}
	if _, err := os.Stat(filepath.Join("bin", localcp.APIServer)); err == nil {
		return "bin"
	}
	if exe, err := os.Executable(); err == nil {
		return filepath.Dir(exe)
	}
	return "bin"
}
