// Package setup is the one place that builds the Converge manager: the scheme,
// the cache (namespaces, sharding), leader election, probes, metrics, the
// webhook server and its certificates, and the controllers and webhooks
// selected by name. `converge run`, `converge up` and every test suite call
// it, so what passes in tests is what ships.
package setup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	backupv1alpha1 "github.com/converge-dev/converge/api/backup/v1alpha1"
	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/acme"
	"github.com/converge-dev/converge/internal/controller/certificaterequest"
	"github.com/converge-dev/converge/internal/controller/database"
	"github.com/converge-dev/converge/internal/controller/dhcpagentdeployment"
	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/eventgate"
	"github.com/converge-dev/converge/internal/gitops/receiver"
	"github.com/converge-dev/converge/internal/install"
	"github.com/converge-dev/converge/internal/leaderfence"
	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/sharding"
	"github.com/converge-dev/converge/internal/webhookcert"
)

// ShardLabel is the label that assigns an object to a shard (as Flux's
// sharding.fluxcd.io/key). A manager started with --shard-key=K reconciles
// only Converge objects labelled ShardLabel=K; a manager without a shard key
// reconciles only those without the label.
const ShardLabel = sharding.Label

// Options configure the manager. The zero value is not usable; start from
// DefaultOptions.
type Options struct {
	// Controllers selects controllers by name, as kube-controller-manager's
	// --controllers: "*" enables all, "name" enables one, "-name" disables
	// one. Empty means "*".
	Controllers []string
	// WatchNamespaces restricts the cache to these namespaces; empty watches
	// all.
	WatchNamespaces []string
	// CacheAllSecretData keeps the data of every Secret in the shared
	// cache. By default only Secrets labelled secretcache.Label keep it;
	// others are cached as metadata and read from the API server when a
	// controller reads them (internal/secretcache).
	CacheAllSecretData bool
	// SecretCacheMaxBytes bounds the Secret data the shared cache keeps in
	// all (secretcache.Budget): Secrets beyond it are cached as metadata and
	// read from the API server when needed, whatever their labels. 0 is
	// secretcache.DefaultBudgetBytes; negative means no bound. Ignored with
	// CacheAllSecretData.
	SecretCacheMaxBytes int64
	// ShardKey selects the shard this manager serves (see ShardLabel).
	ShardKey string

	// MetricsBindAddress serves Prometheus metrics; "0" disables.
	MetricsBindAddress string
	// SecureMetrics serves metrics over HTTPS behind authentication and
	// authorization (TokenReview / SubjectAccessReview).
	SecureMetrics bool
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables.
	HealthProbeBindAddress string
	// PprofBindAddress serves net/http/pprof (heap and CPU profiles of the
	// manager); "" or "0" disables (the default).
	PprofBindAddress string

	// LeaderElection enables leader election with a Lease.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; empty uses the in-cluster
	// namespace.
	LeaderElectionNamespace string
	// LeaderElectionID names the Lease; the shard key is appended.
	LeaderElectionID string
	// LeaderElectionTimings are the Lease's timings (validated: see
	// leaderfence.Timings.Validate). Controller writes are fenced by the
	// Lease (internal/leaderfence), and standbys warm their caches before
	// they win.
	LeaderElectionTimings leaderfence.Timings

	// Webhook configures the admission webhook server.
	Webhook WebhookOptions

	// GracefulShutdownTimeout bounds how long runnables get to stop.
	GracefulShutdownTimeout time.Duration

	// KubeAPIQPS and KubeAPIBurst set the client-side API budgets (see
	// Budget): the key "" is the default of every controller and of the
	// manager's own clients, a controller's name its own. What is not set
	// takes DefaultBudget. Each controller gets its own token bucket.
	KubeAPIQPS   map[string]float32
	KubeAPIBurst map[string]int

	// GitOps configures the GitRepository and Sync controllers.
	GitOps GitOpsOptions

	// Receiver configures the push webhook receiver and its listener
	// (--receiver-bind-address), apart from the admission webhook server.
	Receiver receiver.Options

	// BackupDir is the backup store of the backup-before-delete controller
	// (dumps are written under it) and of restores (restoreFrom reads from
	// it). In-cluster it is a mounted volume (a PVC); `converge up` uses
	// <data-dir>/backups, .converge/backups by default.
	BackupDir string
	// DatabaseObserveInterval is how often each database instance's server
	// is observed for drift, all its Databases in one snapshot.
	DatabaseObserveInterval time.Duration
	// DatabaseResyncInterval is how often a Ready Database is fully
	// reconciled (its password and extensions checked), ±5 %.
	DatabaseResyncInterval time.Duration
	// LBDefaultClass makes the loadbalancer-ipam controller serve
	// LoadBalancer Services without spec.loadBalancerClass.
	LBDefaultClass bool
	// LBMaxListenersPerNamespace bounds the listeners (ports of
	// LoadBalancer Services holding an address) one namespace may put on
	// the data plane; 0 is no bound.
	LBMaxListenersPerNamespace int
	// LBMaxAssignmentsPerPool bounds the assignments one IPAddressPool's
	// status holds (Services sharing an address each count); 0 is the
	// schema's bound, 65536.
	LBMaxAssignmentsPerPool int
	// SQLInstanceHealthInterval is how often a Ready PostgresInstance or
	// MariaDBInstance logs in again.
	SQLInstanceHealthInterval time.Duration

	// EgressDeniedCIDRs are the networks the manager never dials for a
	// tenant (a GitRepository's URL, a database instance's host), unless
	// EgressAllowedCIDRs holds the address (--egress-denied-cidrs):
	// egress.DefaultDenied (loopback, link-local, metadata) by default.
	EgressDeniedCIDRs []string
	// EgressAllowedCIDRs are exceptions to EgressDeniedCIDRs
	// (--egress-allowed-cidrs); `converge up` allows loopback, where its
	// peers listen.
	EgressAllowedCIDRs []string
	// egress is the Policy New builds from the two above and
	// GitOps.FileRoots, handed to the controllers that reach out.
	egress *egress.Policy

	// Machines configures the Machine controller and the machine providers.
	Machines machineoptions.Machines
	// DHCPAgent configures cluster mode of the DHCP agent.
	DHCPAgent DHCPAgentOptions
	// BMC configures the virtual BMCs.
	BMC BMCOptions
	// PKI configures the certificate controllers.
	PKI PKIOptions

	// SkipControllerNameValidation allows several managers in one process
	// (tests); controller names are otherwise unique per process so that
	// metrics are not reported twice.
	SkipControllerNameValidation bool
}

// GitOpsOptions configure the GitRepository and Sync controllers.
type GitOpsOptions struct {
	// FileRoots are the directories a file:// GitRepository may read
	// (--git-file-roots); none by default: the manager's file system is
	// not a tenant's. `converge up` allows the directory it started in.
	FileRoots []string
	// CacheDir holds the fetched git revisions (artifacts) the Sync
	// controller renders. Empty uses a new temporary directory; it is a
	// cache, rebuilt by fetching again after a restart.
	CacheDir string
	// AllowCrossNamespaceRefs lets a Sync reference a GitRepository in
	// another namespace.
	AllowCrossNamespaceRefs bool
	// DefaultServiceAccount is impersonated by Syncs that set no
	// serviceAccountName (as Flux's --default-service-account); it names a
	// ServiceAccount in each Sync's own namespace. Empty: see Lockdown.
	DefaultServiceAccount string
	// MaxFetchSize bounds the bytes one git fetch writes; 0 is
	// git.DefaultMaxFetchSize (512 MiB).
	MaxFetchSize int64
	// MaxArtifactSize bounds the files of one revision, checked before any
	// is written; 0 is git.DefaultMaxArtifactSize (100 MiB).
	MaxArtifactSize int64
	// MaxManifests bounds the objects one render returns; 0 is
	// render.DefaultMaxManifests.
	MaxManifests int
	// MaxFileSize bounds each file a render reads; 0 is
	// render.DefaultMaxFileSize.
	MaxFileSize int64
	// RenderTimeout bounds one render; 0 is render.DefaultTimeout.
	RenderTimeout time.Duration
	// RenderCacheObjects bounds the rendered objects the Sync controller
	// keeps in memory across all Syncs (least recently used evicted, the
	// newest always kept); 0 is sync.DefaultRenderCacheObjects.
	RenderCacheObjects int
	// Lockdown makes sure no Sync ever acts as the manager: a Sync that
	// names no service account, while DefaultServiceAccount is empty, is
	// refused by the webhook and Stalled (ServiceAccountRequired) by the
	// controller. Without Lockdown such a Sync uses the manager's identity,
	// which suits single-user clusters only (`converge up` turns it off).
	Lockdown bool
}

// PKIOptions configure the Issuer, ClusterIssuer, CertificateRequest and
// Certificate controllers and their webhooks.
type PKIOptions struct {
	// ClusterResourceNamespace holds the Secrets (CA, ACME account key) of
	// ClusterIssuers (as cert-manager's --cluster-resource-namespace).
	ClusterResourceNamespace string
	// OwnSecrets sets an ownerReference from every Certificate's Secret to
	// the Certificate (--certificate-owns-secret); spec.ownSecret overrides.
	OwnSecrets bool
	// ACMEHTTP01BindAddress serves ACME HTTP-01 answers; "0" or empty
	// disables the listener.
	ACMEHTTP01BindAddress string
	// ACMEHTTP01Namespace, when set, is the manager's namespace, where
	// pending HTTP-01 answers are published as ConfigMaps so that every
	// replica answers them (certificaterequest.ConfigMapShared); empty keeps
	// them in the leader's memory (one replica).
	ACMEHTTP01Namespace string
	// MinimumCertificateDuration is the shortest spec.duration the webhook
	// accepts; 1h when zero. Tests lower it.
	MinimumCertificateDuration time.Duration
	// BackoffBase is the wait after a first failed issuance (doubling, at
	// most 32h); 1h when zero.
	BackoffBase time.Duration
	// CAInjectionOverlap is how long the cainjector keeps the previous CA
	// in an injected bundle after a rotation (and after the last
	// certificate it signed is reissued); 1h when zero, none when negative.
	CAInjectionOverlap time.Duration
	// Solver holds the HTTP-01 answers; made by New when nil.
	Solver *acme.Solver
	// ACMEAllowedDirectories are the URL prefixes of the ACME directories
	// issuers may name (--acme-allowed-directories); the manager talks to
	// no other. Let's Encrypt's production and staging by default; empty
	// allows none.
	ACMEAllowedDirectories []string
	// ACMENamespacedDNSNames are the DNS names a namespaced acme Issuer
	// (outside ClusterResourceNamespace) may order
	// (--acme-namespaced-dns-names): patterns as a ClusterIssuer's
	// spec.policy.allowedDNSNames, "{namespace}" standing for the Issuer's
	// namespace. Every order's challenge is answered by the one shared
	// HTTP-01 port, so without a bound any namespace could obtain a
	// certificate for any name routed to it. Empty (the default) lets
	// namespaced acme Issuers order nothing.
	ACMENamespacedDNSNames []string
	// MaxRSAKeySize is the largest RSA key a Certificate may ask for
	// (--max-rsa-key-size); pki.DefaultMaxRSAKeySize (4096) when zero.
	MaxRSAKeySize int
}

// WebhookOptions configure the webhook server and its certificate.
type WebhookOptions struct {
	// Disabled runs no webhook server.
	Disabled bool
	// Host and Port are where the server listens.
	Host string
	Port int
	// CertDir keeps the certificate in files (local mode). Exclusive with
	// CertSecret.
	CertDir string
	// CertSecret is "namespace/name" of the Secret holding the certificate
	// (in-cluster mode).
	CertSecret string
	// SelfManage issues, renews and injects the CA bundle; otherwise another
	// tool (cert-manager, Helm) owns the Secret and the caBundle.
	SelfManage bool
	// Hosts are the names the certificate must cover: in-cluster the webhook
	// Service DNS names, locally 127.0.0.1.
	Hosts []string
}

// DefaultBackupDir is the in-cluster backup store: mount a volume there.
const DefaultBackupDir = "/var/lib/converge/backups"

// DefaultLBMaxAssignmentsPerPool is the default --lb-max-assignments-per-pool:
// 512 of the largest assignments an IPAddressPool's status can hold (128
// ports, the longest names and sharing key, about 2.4 KB each) stay under
// etcd's default 1.5 MiB object limit, so the bound, not a failed write, is
// what a Service past it meets.
const DefaultLBMaxAssignmentsPerPool = 512

// LocalBackupDir is the backup store of local mode, under the data
// directory.
func LocalBackupDir(dataDir string) string { return filepath.Join(dataDir, "backups") }

// DefaultOptions returns the defaults `converge run` starts from.
func DefaultOptions() Options {
	return Options{
		Controllers:            []string{"*"},
		MetricsBindAddress:     ":8443",
		SecureMetrics:          true,
		HealthProbeBindAddress: ":8081",
		LeaderElectionID:       "converge-manager",
		LeaderElectionTimings: leaderfence.Timings{
			LeaseDuration: leaderfence.DefaultLeaseDuration,
			RenewDeadline: leaderfence.DefaultRenewDeadline,
			RetryPeriod:   leaderfence.DefaultRetryPeriod,
		},
		GracefulShutdownTimeout:    30 * time.Second,
		BackupDir:                  DefaultBackupDir,
		GitOps:                     GitOpsOptions{Lockdown: true},
		DatabaseObserveInterval:    database.DefaultObserveInterval,
		DatabaseResyncInterval:     database.DefaultResyncInterval,
		LBDefaultClass:             true,
		LBMaxListenersPerNamespace: 256,
		LBMaxAssignmentsPerPool:    DefaultLBMaxAssignmentsPerPool,
		SQLInstanceHealthInterval:  time.Minute,
		EgressDeniedCIDRs:          egress.DefaultDenied,
		Webhook: WebhookOptions{
			Port:       9443,
			SelfManage: true,
		},
		Receiver: receiver.DefaultOptions(),
		PKI:      PKIOptions{ClusterResourceNamespace: "converge-system", ACMEAllowedDirectories: acme.DefaultAllowedDirectories},
	}
}

// Scheme returns a scheme with the Kubernetes built-in types, CRDs and every
// Converge API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(workloadsv1alpha1.AddToScheme(s))
	utilruntime.Must(gitopsv1alpha1.AddToScheme(s))
	utilruntime.Must(sqlv1alpha1.AddToScheme(s))
	utilruntime.Must(backupv1alpha1.AddToScheme(s))
	utilruntime.Must(lbv1alpha1.AddToScheme(s))
	utilruntime.Must(machinev1alpha1.AddToScheme(s))
	utilruntime.Must(infrastructurev1alpha1.AddToScheme(s))
	utilruntime.Must(pkiv1alpha1.AddToScheme(s))
	utilruntime.Must(dhcpv1alpha1.AddToScheme(s))
	utilruntime.Must(bmcv1alpha1.AddToScheme(s))
	utilruntime.Must(upgradev1alpha1.AddToScheme(s))
	return s
}

// Converge is a built, not yet started, manager.
type Converge struct {
	// Manager is the controller-runtime manager; Start runs it.
	Manager ctrl.Manager
	// Certs serves the webhook certificate; nil when webhooks are disabled.
	Certs *webhookcert.Manager
	// Enabled lists the controllers that were set up, sorted.
	Enabled []string
	// APIs holds each enabled controller's own clients and budget, by name.
	APIs map[string]*ControllerAPI
	// Fence gates every controller write on the leader Lease; nil without
	// leader election.
	Fence *leaderfence.Fence

	events *eventgate.Gate
}

// New builds the manager: it validates options, loads (or issues) the webhook
// certificate, and sets up the selected controllers and all webhooks.
func New(ctx context.Context, cfg *rest.Config, o Options) (*Converge, error) {
	enabled, err := SelectControllers(o.Controllers)
	if err != nil {
		return nil, err
	}
	if err := validateBudgets(o); err != nil {
		return nil, err
	}
	switch o.Machines.QemuAccel {
	case qemu.AccelAuto, qemu.AccelKVM, qemu.AccelTCG:
	default:
		return nil, fmt.Errorf("--machine-qemu-accel=%q: want kvm, tcg or empty (automatic)", o.Machines.QemuAccel)
	}
	switch o.Machines.QemuMachines {
	case "", machineoptions.QemuMachinesManager, machineoptions.QemuMachinesAgent:
	default:
		return nil, fmt.Errorf("--qemu-machines=%q: want %s or %s", o.Machines.QemuMachines, machineoptions.QemuMachinesManager, machineoptions.QemuMachinesAgent)
	}
	if o.egress, err = egress.New(o.EgressDeniedCIDRs, o.EgressAllowedCIDRs, o.GitOps.FileRoots); err != nil {
		return nil, err
	}
	if p := o.Machines.NetbootHTTPPort; p < 0 || p > 65535 {
		return nil, fmt.Errorf("--netboot-http-port=%d: want a TCP port (1-65535), or 0 for the default 8069", p)
	}
	// The manager's own clients: shared informers, events, leader election,
	// webhook certificate, push receiver.
	cfg = rest.CopyConfig(cfg)
	if mb := o.Budget(""); mb.Unlimited() {
		cfg.QPS, cfg.Burst = -1, 0
	} else {
		cfg.QPS, cfg.Burst = mb.QPS, mb.Burst
	}
	scheme := Scheme()
	secretBudget := newSecretBudget(o)
	mopts := ctrl.Options{
		Scheme:                  scheme,
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		PprofBindAddress:        o.PprofBindAddress,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        leaderElectionID(o),
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// Step down at once on shutdown, so the next replica takes over fast;
		// safe because the process exits right after.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &o.GracefulShutdownTimeout,
		Metrics: metricsserver.Options{
			BindAddress:   o.MetricsBindAddress,
			SecureServing: o.SecureMetrics,
		},
		Cache:    cacheOptions(o, secretBudget),
		Client:   clientOptions(),
		NewCache: newCache(o, secretBudget),
	}
	if o.SkipControllerNameValidation {
		mopts.Controller.SkipNameValidation = &o.SkipControllerNameValidation
	}
	var fence *leaderfence.Fence
	if o.LeaderElection {
		t := o.LeaderElectionTimings
		if err := t.Validate(); err != nil {
			return nil, err
		}
		fence = leaderfence.NewFence(t.RenewDeadline)
		lock, err := leaderfence.NewLeaseLock(cfg, o.LeaderElectionNamespace, leaderElectionID(o), t, fence)
		if err != nil {
			return nil, err
		}
		mopts.LeaderElectionResourceLockInterface = lock
		mopts.LeaseDuration, mopts.RenewDeadline, mopts.RetryPeriod = &t.LeaseDuration, &t.RenewDeadline, &t.RetryPeriod
		// Warm standbys: every controller starts its sources (and so fills
		// the shared cache) before this replica wins the Lease.
		warm := true
		mopts.Controller.EnableWarmup = &warm
	}
	if o.SecureMetrics {
		mopts.Metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	// HTTP/2 is disabled on every server we run (CVE-2023-44487,
	// CVE-2023-39325: stream cancellation and rapid reset).
	disableHTTP2 := func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
	mopts.Metrics.TLSOpts = []func(*tls.Config){disableHTTP2}

	var certs *webhookcert.Manager
	if !o.Webhook.Disabled {
		certs, err = newCertManager(cfg, o.Webhook, scheme)
		if err != nil {
			return nil, err
		}
		if err := certs.Sync(ctx); err != nil {
			return nil, err
		}
		mopts.WebhookServer = webhook.NewServer(webhook.Options{
			Host:    o.Webhook.Host,
			Port:    o.Webhook.Port,
			TLSOpts: []func(*tls.Config){disableHTTP2, certs.TLSOpt},
		})
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if certs != nil {
		if err := mgr.Add(certs); err != nil {
			return nil, err
		}
		for _, w := range webhooks {
			fn := w.setup
			if w.setupWithOptions != nil {
				fn = func(mgr ctrl.Manager) error { return w.setupWithOptions(mgr, o) }
			}
			if err := fn(mgr); err != nil {
				return nil, fmt.Errorf("setting up %s webhook: %w", w.name, err)
			}
		}
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return nil, err
		}
	}
	if o.Receiver.Enabled() {
		// Push webhooks from git hosts (GitHub, GitLab, generic) have a
		// listener of their own, rate-limited, and are verified before any
		// API read.
		if _, err := receiver.Setup(ctx, mgr, o.Receiver); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if o.GitOps.CacheDir == "" {
		dir, err := os.MkdirTemp("", "converge-gitops-")
		if err != nil {
			return nil, fmt.Errorf("creating the gitops cache directory: %w", err)
		}
		o.GitOps.CacheDir = dir
		// A directory we made is ours to remove when the manager stops.
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			<-ctx.Done()
			return os.RemoveAll(dir)
		})); err != nil {
			return nil, err
		}
	}
	if o.PKI.Solver == nil {
		o.PKI.Solver = acme.NewSolver()
	}
	if ns := o.PKI.ACMEHTTP01Namespace; ns != "" && o.PKI.Solver.Shared == nil {
		o.PKI.Solver.Shared = certificaterequest.ConfigMapShared{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: ns}
	}
	// Only the CertificateRequest controller answers ACME challenges: a
	// manager without it never binds the port (two replicas of a GitOps-only
	// manager on one host must not collide on it).
	if a := o.PKI.ACMEHTTP01BindAddress; a != "" && a != "0" && slices.Contains(enabled, certificaterequest.ControllerName) {
		if err := mgr.Add(&acme.Server{Addr: a, Solver: o.PKI.Solver}); err != nil {
			return nil, err
		}
	}
	// The controllers' Events wait in a bounded queue, not in a goroutine
	// each (internal/eventgate); they are sent with the manager's budget.
	gate := eventgate.New(scheme, o.Budget(""))
	if err := mgr.Add(gate); err != nil {
		return nil, err
	}
	apis := make(map[string]*ControllerAPI, len(enabled))
	for _, name := range enabled {
		api, err := newControllerAPI(mgr, name, o.Budget(name), fence)
		if err != nil {
			return nil, err
		}
		apis[name] = api
		c := controllerByName(name)
		if err := c.setup(&controllerManager{Manager: mgr, api: api, events: gate}, o); err != nil {
			return nil, fmt.Errorf("setting up controller %s: %w", name, err)
		}
	}
	return &Converge{Manager: mgr, Certs: certs, Enabled: enabled, APIs: apis, Fence: fence, events: gate}, nil
}

// CABundle returns the CA that signed the webhook serving certificate, for
// installing webhook configurations.
func (c *Converge) CABundle(ctx context.Context) ([]byte, error) {
	if c.Certs == nil {
		return nil, errors.New("webhooks are disabled")
	}
	b, err := c.Certs.Store.Load(ctx)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errors.New("no webhook certificate")
	}
	return b.CACert, nil
}

func newCertManager(cfg *rest.Config, o WebhookOptions, scheme *runtime.Scheme) (*webhookcert.Manager, error) {
	m := &webhookcert.Manager{
		Hosts:             o.Hosts,
		SelfManage:        o.SelfManage,
		MutatingConfigs:   []string{install.MutatingWebhookConfigurationName},
		ValidatingConfigs: []string{install.ValidatingWebhookConfigurationName},
	}
	switch {
	case o.CertDir != "" && o.CertSecret != "":
		return nil, errors.New("--webhook-cert-dir and --webhook-cert-secret are exclusive")
	case o.CertDir != "":
		m.Store = webhookcert.DirStore{Dir: o.CertDir}
	case o.CertSecret != "":
		ns, name, ok := strings.Cut(o.CertSecret, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("--webhook-cert-secret %q: want namespace/name", o.CertSecret)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		m.Store = webhookcert.NewSecretStore(cs, ns, name)
	default:
		return nil, errors.New("webhooks need --webhook-cert-dir or --webhook-cert-secret (or --webhook-port=0 to disable them)")
	}
	if len(m.Hosts) == 0 {
		return nil, errors.New("the webhook certificate needs at least one host name (--webhook-host-names)")
	}
	if o.SelfManage {
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, err
		}
		m.Client = c
	}
	return m, nil
}

func leaderElectionID(o Options) string {
	if o.ShardKey == "" {
		return o.LeaderElectionID
	}
	return o.LeaderElectionID + "-" + o.ShardKey
}

// cacheOptions restricts the cache to the watched namespaces and, for
// Converge's own kinds only, to this manager's shard. Children (Pods,
// Secrets, ...) are not labelled with the shard, so they are not filtered.
// Cached objects carry no managedFields: no controller reads them from the
// shared cache (the Sync controller's prune and drift checks read them with
// their own clients and drift cache), and a write from a cached object
// without them leaves the server's untouched. They were a large part of a
// cached Certificate or CertificateRequest (bench/README.md, "Memory of the
// manager, certificates").
func cacheOptions(o Options, secretBudget *secretcache.Budget) cache.Options {
	co := cache.Options{ByObject: map[client.Object]cache.ByObject{}, DefaultTransform: cache.TransformStripManagedFields()}
	if len(o.WatchNamespaces) > 0 {
		co.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.WatchNamespaces {
			co.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	sel := ShardSelector(o.ShardKey)
	for _, obj := range shardedKinds() {
		co.ByObject[obj] = cache.ByObject{Label: sel}
	}
	if !o.CacheAllSecretData {
		co.ByObject[&corev1.Secret{}] = cache.ByObject{Transform: secretBudget.Transform}
	}
	if o.DHCPAgent.Image != "" {
		// Only the agent Deployments, in their namespace.
		co.ByObject[&appsv1.Deployment{}] = cache.ByObject{
			Namespaces: map[string]cache.Config{o.DHCPAgent.Namespace: {}},
			Label:      labels.SelectorFromSet(labels.Set{dhcpagentdeployment.ComponentLabel: dhcpagentdeployment.Component}),
		}
	}
	return co
}

// newSecretBudget is the bound of the Secret data the shared cache keeps
// (--secret-cache-max-bytes).
func newSecretBudget(o Options) *secretcache.Budget {
	switch {
	case o.SecretCacheMaxBytes == 0:
		return secretcache.NewBudget(secretcache.DefaultBudgetBytes)
	case o.SecretCacheMaxBytes < 0:
		return secretcache.NewBudget(-1)
	default:
		return secretcache.NewBudget(int(min(o.SecretCacheMaxBytes, math.MaxInt32)))
	}
}

// newCache builds the manager's cache: unless every Secret's data is
// cached (--cache-all-secret-data), a secretcache.Reader around it, so that
// every Get of a Secret through the manager's cache or any controller's
// client returns the whole Secret. The Secret informer is made here, so
// that the Budget hears of every deletion (it gives the bytes back).
func newCache(o Options, secretBudget *secretcache.Budget) cache.NewCacheFunc {
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		c, err := cache.New(cfg, opts)
		if err != nil || o.CacheAllSecretData {
			return c, err
		}
		live, err := client.New(cfg, client.Options{HTTPClient: opts.HTTPClient, Scheme: opts.Scheme, Mapper: opts.Mapper})
		if err != nil {
			return nil, fmt.Errorf("building the manager's Secret reader: %w", err)
		}
		// A NewCacheFunc is given no context; the informer is only made
		// here (not waited for), and runs when the manager starts the cache.
		inf, err := c.GetInformer(context.Background(), &corev1.Secret{}, cache.BlockUntilSynced(false)) //nolint:forbidigo // see above
		if err != nil {
			return nil, fmt.Errorf("building the manager's Secret informer: %w", err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: secretBudget.Forget}); err != nil {
			return nil, fmt.Errorf("watching Secret deletions for the Secret cache's budget: %w", err)
		}
		return &secretcache.Reader{Cache: c, Live: live, Data: secretcache.NewData(secretcache.DefaultDataBytes), Budget: secretBudget}, nil
	}
}

// ShardSelector selects the objects of one shard: labelled with the key, or,
// for the default shard, without the label.
func ShardSelector(key string) labels.Selector {
	var req *labels.Requirement
	var err error
	if key == "" {
		req, err = labels.NewRequirement(ShardLabel, selection.DoesNotExist, nil)
	} else {
		req, err = labels.NewRequirement(ShardLabel, selection.Equals, []string{key})
	}
	utilruntime.Must(err)
	return labels.NewSelector().Add(*req)
}

// shardedKinds are the Converge kinds a shard key partitions: every kind
// of a *.converge.dev group in Scheme, so that a kind added later cannot be
// forgotten (a shard manager and the default one would both reconcile it:
// two VMs for one QemuMachine, two issuances for one Certificate).
func shardedKinds() []client.Object {
	s := Scheme()
	var out []client.Object
	gvks := slices.SortedFunc(maps.Keys(s.AllKnownTypes()), func(a, b schema.GroupVersionKind) int {
		return strings.Compare(a.String(), b.String())
	})
	for _, gvk := range gvks {
		if !strings.HasSuffix(gvk.Group, ".converge.dev") || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		obj, err := s.New(gvk)
		if err != nil {
			continue
		}
		if o, ok := obj.(client.Object); ok {
			out = append(out, o)
		}
	}
	return out
}

// SelectControllers resolves --controllers into a sorted list of names.
func SelectControllers(spec []string) ([]string, error) {
	if len(spec) == 0 {
		spec = []string{"*"}
	}
	all := ControllerNames()
	on := map[string]bool{}
	star := false
	for _, s := range spec {
		s = strings.TrimSpace(s)
		switch {
		case s == "*":
			star = true
		case strings.HasPrefix(s, "-"):
			name := s[1:]
			if !slices.Contains(all, name) {
				return nil, fmt.Errorf("--controllers: unknown controller %q (known: %s)", name, strings.Join(all, ", "))
			}
			on[name] = false
		case s != "":
			if !slices.Contains(all, s) {
				return nil, fmt.Errorf("--controllers: unknown controller %q (known: %s)", s, strings.Join(all, ", "))
			}
			on[s] = true
		}
	}
	var out []string
	for _, name := range all {
		enabled, named := on[name]
		if (star && !named) || enabled {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// LocalWebhookOptions are the webhook options of local mode: certificates in
// dir, served on 127.0.0.1:port.
func LocalWebhookOptions(dir string, port int) WebhookOptions {
	return WebhookOptions{
		Host:       "127.0.0.1",
		Port:       port,
		CertDir:    dir,
		SelfManage: true,
		Hosts:      []string{"127.0.0.1", "localhost"},
	}
}

// LocalWebhookURL is the URL the API server uses to reach a local webhook
// server.
func LocalWebhookURL(port int) string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
