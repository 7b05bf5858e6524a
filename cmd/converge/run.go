package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/converge-dev/converge/internal/apibudget"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/controller/cainjector"
	syncctrl "github.com/converge-dev/converge/internal/controller/sync"
	"github.com/converge-dev/converge/internal/git"
	"github.com/converge-dev/converge/internal/gitops/render"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/version"
)

func newRunCommand(g *globalFlags) *cobra.Command {
	o := setup.DefaultOptions()
	var webhookPort int
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the Converge manager against a cluster",
		Long: `Run the Converge manager (every enabled controller and the admission
webhooks) against the cluster of --kubeconfig, or in-cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setupLogging(g, os.Stderr); err != nil {
				return err
			}
			memLimit := setMemoryLimit()
			cfg, err := restConfig(g.kubeconfig)
			if err != nil {
				return err
			}
			if webhookPort == 0 {
				o.Webhook.Disabled = true
			}
			o.Webhook.Port = webhookPort
			if o.LeaderElectionNamespace == "" {
				o.LeaderElectionNamespace = podNamespace()
			}
			if o.DHCPAgent.Image != "" && o.DHCPAgent.Namespace == "" {
				o.DHCPAgent.Namespace = podNamespace()
			}
			if !strings.Contains(o.BMC.CASecret, "/") {
				name := o.BMC.CASecret
				if name == "" {
					name = bmc.DefaultCASecretName
				}
				o.BMC.CASecret = podNamespace() + "/" + name
			}
			if o.Webhook.CertSecret != "" && !strings.Contains(o.Webhook.CertSecret, "/") {
				o.Webhook.CertSecret = podNamespace() + "/" + o.Webhook.CertSecret
			}
			ctx := ctrl.SetupSignalHandler()
			cv, err := setup.New(ctx, cfg, o)
			if err != nil {
				return err
			}
			ctrl.Log.Info("Starting Converge manager", "version", version.Get(), "controllers", cv.Enabled,
				"shardKey", o.ShardKey, "watchNamespaces", o.WatchNamespaces, "goMemoryLimit", memLimit)
			if err := cv.Manager.Start(ctx); err != nil {
				return fmt.Errorf("manager: %w", err)
			}
			return nil
		},
	}
	addRunFlags(cmd.Flags(), &o, &webhookPort)
	return cmd
}

// addRunFlags adds the flags of `converge run` to f, writing o and
// webhookPort.
func addRunFlags(f *pflag.FlagSet, o *setup.Options, webhookPort *int) {
	f.StringSliceVar(&o.Controllers, "controllers", o.Controllers, fmt.Sprintf(
		"controllers to run: '*' for all, 'name' to enable, '-name' to disable (known: %s)", strings.Join(setup.ControllerNames(), ", ")))
	f.StringSliceVar(&o.WatchNamespaces, "watch-namespace", nil, "only watch these namespaces (default: all)")
	f.BoolVar(&o.CacheAllSecretData, "cache-all-secret-data", false, "keep every Secret's data in the shared cache (default: only Secrets of at most 1 KiB of data, or labelled "+secretcache.Label+" and of at most 32 KiB, within --secret-cache-max-bytes; others are read from the API server when needed)")
	o.SecretCacheMaxBytes = secretcache.DefaultBudgetBytes
	f.Var(sizeFlag{&o.SecretCacheMaxBytes}, "secret-cache-max-bytes", "Secret data the shared cache keeps in all, whatever the Secrets' labels (first come, first kept); Secrets beyond are read from the API server when needed")
	f.StringVar(&o.ShardKey, "shard-key", "", "serve only objects labelled "+setup.ShardLabel+"=<key>; without it, only objects without that label")
	f.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "metrics endpoint address; '0' disables")
	f.BoolVar(&o.SecureMetrics, "metrics-secure", o.SecureMetrics, "serve metrics over HTTPS with authentication and authorization")
	f.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "address of /healthz and /readyz; '0' disables")
	f.StringVar(&o.PprofBindAddress, "pprof-bind-address", "", "serve Go's /debug/pprof profiles (heap, CPU) on this address, for debugging; empty or '0' disables")
	f.BoolVar(&o.LeaderElection, "leader-elect", false, "use a Lease so that one replica is active at a time")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the Pod's namespace)")
	f.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "name of the Lease (the shard key is appended)")
	f.DurationVar(&o.LeaderElectionTimings.LeaseDuration, "leader-elect-lease-duration", o.LeaderElectionTimings.LeaseDuration,
		"how long a standby waits after the last renewal it saw before it takes the Lease (a killed leader is replaced after about this plus one retry period)")
	f.DurationVar(&o.LeaderElectionTimings.RenewDeadline, "leader-elect-renew-deadline", o.LeaderElectionTimings.RenewDeadline,
		"how long the leader tries to renew before it steps down; it stops writing this long after its last successful renewal was sent (at least 500ms under the lease duration)")
	f.DurationVar(&o.LeaderElectionTimings.RetryPeriod, "leader-elect-retry-period", o.LeaderElectionTimings.RetryPeriod,
		"how often the leader renews and standbys try to acquire (one Lease request per period per replica; at most half the renew deadline)")
	addBudgetFlags(f, o)
	f.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", o.GracefulShutdownTimeout, "how long controllers get to finish on shutdown")
	f.StringVar(&o.Receiver.BindAddress, "receiver-bind-address", o.Receiver.BindAddress, "address of the push webhook receiver (plain HTTP; put TLS in front); '0' disables")
	f.Float64Var(&o.Receiver.Rate, "receiver-rate", o.Receiver.Rate, "push webhooks per second the receiver accepts in all (burst --receiver-burst); beyond, it answers 429")
	f.IntVar(&o.Receiver.Burst, "receiver-burst", o.Receiver.Burst, "burst of push webhooks the receiver accepts in all")
	f.Float64Var(&o.Receiver.SourceRate, "receiver-source-rate", o.Receiver.SourceRate, "push webhooks per second the receiver accepts from one client address (burst --receiver-source-burst)")
	f.IntVar(&o.Receiver.SourceBurst, "receiver-source-burst", o.Receiver.SourceBurst, "burst of push webhooks the receiver accepts from one client address")
	f.IntVar(webhookPort, "webhook-port", o.Webhook.Port, "webhook server port; 0 disables the webhook server")
	f.StringVar(&o.Webhook.CertDir, "webhook-cert-dir", "", "keep the webhook certificate in this directory")
	f.StringVar(&o.Webhook.CertSecret, "webhook-cert-secret", "", "keep the webhook certificate in this Secret ([namespace/]name; watched, rotated without restart)")
	f.BoolVar(&o.Webhook.SelfManage, "webhook-cert-self-managed", o.Webhook.SelfManage, "issue and renew the webhook certificate and inject its CA; false when cert-manager or Helm owns them")
	f.StringVar(&o.BackupDir, "backup-dir", o.BackupDir, "backup store of the backup-before-delete controller and of restores (mount a volume here in-cluster)")
	f.DurationVar(&o.DatabaseObserveInterval, "database-observe-interval", o.DatabaseObserveInterval, "how often each database server is checked for drift (one snapshot for all its Databases)")
	f.DurationVar(&o.DatabaseResyncInterval, "database-resync-interval", o.DatabaseResyncInterval, "how often a Ready Database is fully reconciled (password and extensions checked), ±5 %")
	f.BoolVar(&o.LBDefaultClass, "lb-default-class", o.LBDefaultClass, "serve LoadBalancer Services that set no spec.loadBalancerClass (Converge's class is converge.dev/lb)")
	f.IntVar(&o.LBMaxListenersPerNamespace, "lb-max-listeners-per-namespace", o.LBMaxListenersPerNamespace, "most listeners (ports of LoadBalancer Services holding an address) one namespace may have; 0: no bound")
	f.IntVar(&o.LBMaxAssignmentsPerPool, "lb-max-assignments-per-pool", o.LBMaxAssignmentsPerPool, "most assignments (Services holding an address, each sharing one counting) one IPAddressPool may hold; 0: the schema's 65536")
	f.DurationVar(&o.SQLInstanceHealthInterval, "sql-instance-health-interval", o.SQLInstanceHealthInterval, "how often a Ready PostgresInstance or MariaDBInstance logs in again")
	addMachineFlags(f, &o.Machines)
	addQemuMachinesModeFlags(f, &o.Machines)
	addBMCFlags(f, &o.BMC)
	addDHCPAgentFlags(f, &o.DHCPAgent)
	f.StringSliceVar(&o.Webhook.Hosts, "webhook-host-names", nil, "DNS names the webhook certificate covers (e.g. converge-webhook.converge-system.svc)")
	f.StringVar(&o.GitOps.CacheDir, "gitops-cache-dir", "", "directory of fetched git revisions (default: a new temporary directory)")
	f.BoolVar(&o.GitOps.AllowCrossNamespaceRefs, "gitops-allow-cross-namespace-refs", false, "let a Sync use a GitRepository of another namespace")
	o.GitOps.MaxFetchSize, o.GitOps.MaxArtifactSize = git.DefaultMaxFetchSize, git.DefaultMaxArtifactSize
	o.GitOps.MaxManifests, o.GitOps.MaxFileSize, o.GitOps.RenderTimeout = render.DefaultMaxManifests, render.DefaultMaxFileSize, render.DefaultTimeout
	f.Var(sizeFlag{&o.GitOps.MaxFetchSize}, "gitops-max-fetch-size", "bytes one git fetch may receive; beyond, the GitRepository is Stalled (ArtifactTooLarge)")
	f.Var(sizeFlag{&o.GitOps.MaxArtifactSize}, "gitops-max-artifact-size", "total size of the files of one revision, checked before any is written; beyond, the GitRepository is Stalled (ArtifactTooLarge)")
	f.Var(sizeFlag{&o.GitOps.MaxFileSize}, "gitops-max-file-size", "size of each file a render reads; beyond, the Sync is Stalled (RenderLimitExceeded)")
	f.IntVar(&o.GitOps.MaxManifests, "gitops-max-manifests", o.GitOps.MaxManifests, "objects one Sync may render; beyond, the Sync is Stalled (RenderLimitExceeded)")
	f.DurationVar(&o.GitOps.RenderTimeout, "gitops-render-timeout", o.GitOps.RenderTimeout, "time one render may take; beyond, the Sync is Stalled (RenderLimitExceeded)")
	f.IntVar(&o.GitOps.RenderCacheObjects, "gitops-render-cache-objects", syncctrl.DefaultRenderCacheObjects, "rendered objects kept in memory across all Syncs, least recently used evicted first (an evicted Sync renders again on its next reconcile)")
	f.StringVar(&o.GitOps.DefaultServiceAccount, "gitops-default-service-account", "", "service account (in the Sync's namespace) that Syncs naming none act as; the chart sets 'default'")
	f.BoolVar(&o.GitOps.Lockdown, "gitops-lockdown", o.GitOps.Lockdown, "never let a Sync act as the manager: with no --gitops-default-service-account, Syncs without spec.serviceAccountName are refused; false lets them use the manager's identity (single-tenant clusters)")
	addPKIFlags(f, o, ":8089")
	addEgressFlags(f, o, nil, nil)
}

// addEgressFlags adds the flags of what the manager may reach for a tenant
// (internal/egress), with the given defaults of --egress-allowed-cidrs and
// --git-file-roots.
func addEgressFlags(f *pflag.FlagSet, o *setup.Options, allowed, fileRoots []string) {
	f.StringSliceVar(&o.EgressDeniedCIDRs, "egress-denied-cidrs", o.EgressDeniedCIDRs,
		"networks the manager never dials for a GitRepository URL or a database instance host (comma separated CIDRs); add your cluster's Pod and Service CIDRs to keep tenants off in-cluster services")
	f.StringSliceVar(&o.EgressAllowedCIDRs, "egress-allowed-cidrs", allowed,
		"exceptions to --egress-denied-cidrs (comma separated CIDRs or addresses), e.g. a git server on a link-local address")
	f.StringSliceVar(&o.GitOps.FileRoots, "git-file-roots", fileRoots,
		"absolute directories under which file:// GitRepositories may read (comma separated); none: file:// is refused (URLNotAllowed)")
}

// addPKIFlags adds the certificate controllers' flags.
func addPKIFlags(f *pflag.FlagSet, o *setup.Options, http01 string) {
	f.StringVar(&o.PKI.ClusterResourceNamespace, "cluster-resource-namespace", o.PKI.ClusterResourceNamespace, "namespace of the Secrets (CA, ACME account key) of ClusterIssuers")
	f.BoolVar(&o.PKI.OwnSecrets, "certificate-owns-secret", false, "make every Certificate own its Secret, so that deleting the Certificate deletes the Secret (spec.ownSecret overrides)")
	f.DurationVar(&o.PKI.CAInjectionOverlap, "ca-injection-overlap", cainjector.DefaultOverlap, "after a CA rotation, keep trusting the previous CA in bundles injected with pki.converge.dev/inject-ca-from for this long, and longer while issued Secrets hold certificates it signed (negative: not at all)")
	f.StringVar(&o.PKI.ACMEHTTP01BindAddress, "acme-http01-bind-address", http01, "address answering ACME HTTP-01 challenges (route port 80 of the names here); '0' disables")
	f.StringSliceVar(&o.PKI.ACMEAllowedDirectories, "acme-allowed-directories", o.PKI.ACMEAllowedDirectories, "URL prefixes of the ACME directories Issuers and ClusterIssuers may name (comma separated); the manager talks to no other ACME server")
	f.StringSliceVar(&o.PKI.ACMENamespacedDNSNames, "acme-namespaced-dns-names", o.PKI.ACMENamespacedDNSNames, "DNS name patterns a namespaced ACME Issuer may order, '*' one label, '{namespace}' the Issuer's namespace (comma separated, e.g. '*.{namespace}.apps.example.com'); empty: none, give tenants ACME through a ClusterIssuer with spec.policy")
	f.IntVar(&o.PKI.MaxRSAKeySize, "max-rsa-key-size", pki.DefaultMaxRSAKeySize, "largest RSA key (bits) a Certificate may ask for; larger ones are refused at admission and Stalled (KeySizeNotAllowed) when stored")
	f.StringVar(&o.PKI.ACMEHTTP01Namespace, "acme-http01-namespace", "", "the manager's namespace: publish pending HTTP-01 answers there as ConfigMaps so that every replica answers them (set it when more than one replica runs); empty keeps them in the leader's memory")
}

// addBudgetFlags adds --kube-api-qps and --kube-api-burst: one client-side
// budget per controller (docs/architecture.md, "API budgets").
func addBudgetFlags(f *pflag.FlagSet, o *setup.Options) {
	f.Var(apibudget.QPSFlag(&o.KubeAPIQPS, setup.ControllerNames), "kube-api-qps",
		"client-side queries per second to the API server: N for every controller (and the manager's own clients), name=N for one; "+
			"comma separated, repeatable; N < 0 turns the client-side limit off. Defaults (QPS/burst): "+setup.DefaultsHelp())
	f.Var(apibudget.BurstFlag(&o.KubeAPIBurst, setup.ControllerNames), "kube-api-burst",
		"client-side burst of queries to the API server: N for every controller, name=N for one (as --kube-api-qps)")
}

// podNamespace is the namespace the manager runs in (in-cluster), from the
// POD_NAMESPACE variable or the service account mount.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return "converge-system"
}
