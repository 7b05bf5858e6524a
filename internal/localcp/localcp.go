package localcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	// KubernetesVersion is the version of the control-plane binaries that
	// hack/tools pins and this package is written for.
	KubernetesVersion = "v1.37.1"

	serviceCIDR  = "10.96.0.0/16"
	serviceAPIIP = "10.96.0.1"
	podCIDR      = "10.244.0.0/16"

	// ClusterName is the cluster, context and user name in the kubeconfig.
	ClusterName = "converge"
)

//go:embed kwok-stages.yaml
var kwokStages []byte

// Component names, as shown in progress and used for binaries and logs.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kwok              = "kwok"
)

// Config configures a local control plane.
type Config struct {
	// DataDir holds etcd's data, the PKI, the kubeconfig and the component
	// logs. It is created if missing and reused as is on the next start.
	DataDir string
	// BinDir holds the binaries built by `make tools`.
	BinDir string
	// APIServerPort is the kube-apiserver's secure port on 127.0.0.1; 0 picks
	// a free one.
	APIServerPort int
	// EtcdPort is etcd's client port on 127.0.0.1 (the peer port is the next
	// one); 0 picks free ones.
	EtcdPort int
	// ControllerManager starts kube-controller-manager (garbage collection,
	// namespaces, Deployments, service accounts, node lifecycle, ...).
	ControllerManager bool
	// ControllerManagerArgs are appended to kube-controller-manager's
	// arguments (benchmarks set its --kube-api-qps and --kube-api-burst).
	ControllerManagerArgs []string
	// Scheduler starts kube-scheduler, so that Pods get bound to nodes.
	Scheduler bool
	// Nodes is the number of fake nodes kwok runs; 0 does not start kwok.
	Nodes int
	// Ephemeral trades durability for speed (etcd skips fsync); for tests.
	Ephemeral bool
	// Progress, if set, is told about each step.
	Progress func(format string, args ...any)
	// BeforeControllers, if set, runs once the API server is ready and before
	// kube-controller-manager starts. Install CRDs here: the garbage
	// collector discovers resource types at start and then only every 30s.
	BeforeControllers func(ctx context.Context, cfg *rest.Config) error
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	cfg     Config
	pki     pki
	procs   []*process
	failed  chan error
	stopMu  sync.Mutex
	stopped bool
	rest    *rest.Config
}

// Start starts the control plane described by cfg and returns once the API
// server is ready and the other components are running. On error, everything
// started so far is stopped.
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, retErr error) {
	if cfg.Progress == nil {
		cfg.Progress = func(string, ...any) {}
	}
	var err error
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("resolving data directory: %w", err)
	}
	if cfg.BinDir, err = filepath.Abs(cfg.BinDir); err != nil {
		return nil, fmt.Errorf("resolving binary directory: %w", err)
	}
	if err := preflight(&cfg); err != nil {
		return nil, err
	}
	release, err := acquireStartLock(ctx, cfg.Progress)
	if err != nil {
		return nil, err
	}
	defer func() { release() }()
	if err := checkPorts(&cfg); err != nil {
		return nil, err
	}
	cp := &ControlPlane{cfg: cfg, pki: pki{dir: filepath.Join(cfg.DataDir, "pki")}, failed: make(chan error, 8)}
	defer func() {
		if retErr != nil {
			_ = cp.Stop()
		}
	}()
	if err := cp.pki.ensure(); err != nil {
		return nil, err
	}
	if err := cp.writeKubeconfig(); err != nil {
		return nil, err
	}
	if cp.rest, err = cp.RESTConfig(); err != nil {
		return nil, err
	}

	// kube-apiserver spends its first seconds building its API before it
	// dials etcd (and retries until etcd answers), so both start at once.
	etcdURL := cp.EtcdURL()
	etcdClient, err := cp.etcdHTTPClient()
	if err != nil {
		return nil, err
	}
	etcd, api := cp.etcd(etcdURL), cp.apiserver(etcdURL)
	for _, p := range []*process{etcd, api} {
		cfg.Progress("starting %s", p.name)
		if err := cp.launch(p); err != nil {
			return nil, err
		}
	}
	if err := cp.waitFor(ctx, etcd, func(ctx context.Context) error {
		return waitHTTP(ctx, etcdURL+"/health", etcdClient)
	}); err != nil {
		return nil, err
	}
	if err := cp.waitFor(ctx, api, cp.waitAPIServer); err != nil {
		return nil, err
	}
	release()
	release = func() {}

	// The scheduler and kwok do not care about CRDs, so BeforeControllers
	// runs beside their start and the fake nodes' creation;
	// kube-controller-manager starts after it (see Config).
	before := make(chan error, 1)
	if cfg.BeforeControllers != nil {
		go func() { before <- cfg.BeforeControllers(ctx, cp.rest) }()
	} else {
		before <- nil
	}
	if err := cp.startNodeSide(ctx); err != nil {
		// Nothing of BeforeControllers runs on past Start.
		return nil, errors.Join(err, <-before)
	}
	if err := <-before; err != nil {
		return nil, err
	}
	if cfg.ControllerManager {
		if err := cp.launchAndTell(cp.controllerManager()); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// startNodeSide starts kube-scheduler and kwok and creates the fake nodes,
// as configured.
func (cp *ControlPlane) startNodeSide(ctx context.Context) error {
	if cp.cfg.Scheduler {
		if err := cp.launchAndTell(cp.scheduler()); err != nil {
			return err
		}
	}
	if cp.cfg.Nodes == 0 {
		return nil
	}
	if err := cp.releaseNodeLeases(ctx); err != nil {
		return err
	}
	p, err := cp.kwok()
	if err != nil {
		return err
	}
	if err := cp.launchAndTell(p); err != nil {
		return err
	}
	return cp.ensureNodes(ctx)
}

func (cp *ControlPlane) launchAndTell(p *process) error {
	cp.cfg.Progress("starting %s", p.name)
	return cp.launch(p)
}

// waitFor waits until ready succeeds or the launched p exits.
func (cp *ControlPlane) waitFor(ctx context.Context, p *process, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ready(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			if !p.running() {
				return p.exitError()
			}
			return fmt.Errorf("waiting for %s to become ready (log: %s): %w", p.name, p.logPath, err)
		}
	case <-p.exited:
		return p.exitError()
	}
	cp.cfg.Progress("%s ready in %s", p.name, time.Since(p.started).Round(10*time.Millisecond))
	return nil
}

// launch starts p and supervises it: an exit that Stop did not ask for is
// reported on Failed.
func (cp *ControlPlane) launch(p *process) error {
	if err := p.start(); err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	go func() {
		<-p.exited
		cp.stopMu.Lock()
		stopped := cp.stopped
		cp.stopMu.Unlock()
		if !stopped {
			cp.failed <- p.exitError()
		}
	}()
	return nil
}

// Failed delivers an error when a component exits on its own.
func (cp *ControlPlane) Failed() <-chan error { return cp.failed }

// Stop stops every component in reverse start order. It is safe to call
// more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopMu.Lock()
	if cp.stopped {
		cp.stopMu.Unlock()
		return nil
	}
	cp.stopped = true
	cp.stopMu.Unlock()
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		if err := cp.procs[i].stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Pids returns the process ids of the running components, by name.
func (cp *ControlPlane) Pids() map[string]int {
	out := map[string]int{}
	for _, p := range cp.procs {
		if p.running() {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}

// Components returns the names of the components started, in start order.
func (cp *ControlPlane) Components() []string {
	names := make([]string, 0, len(cp.procs))
	for _, p := range cp.procs {
		names = append(names, p.name)
	}
	return names
}

// KubeconfigPath is the admin kubeconfig written into the data directory.
func (cp *ControlPlane) KubeconfigPath() string { return filepath.Join(cp.cfg.DataDir, "kubeconfig") }

// URL is the API server's address.
func (cp *ControlPlane) URL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", cp.cfg.APIServerPort)
}

// EtcdURL is etcd's client address. It serves HTTPS and accepts only client
// certificates signed by the etcd CA (EtcdClientTLS).
func (cp *ControlPlane) EtcdURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", cp.cfg.EtcdPort)
}

// EtcdPeerURL is etcd's peer address (TLS, peer certificates from the etcd
// CA only).
func (cp *ControlPlane) EtcdPeerURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", cp.cfg.EtcdPort+1)
}

// EtcdClientTLS returns a TLS configuration that trusts etcd's serving
// certificate and presents the API server's etcd client certificate: the
// only client etcd accepts.
func (cp *ControlPlane) EtcdClientTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(cp.pki.path(etcdClientCertFile), cp.pki.path(etcdClientKeyFile))
	if err != nil {
		return nil, fmt.Errorf("loading the etcd client certificate: %w", err)
	}
	roots, err := cp.EtcdCA()
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// EtcdCA returns the pool holding the etcd CA, which signs etcd's serving
// certificate.
func (cp *ControlPlane) EtcdCA() (*x509.CertPool, error) {
	ca, err := os.ReadFile(cp.pki.path(etcdCACertFile))
	if err != nil {
		return nil, fmt.Errorf("reading the etcd CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", cp.pki.path(etcdCACertFile))
	}
	return roots, nil
}

func (cp *ControlPlane) etcdHTTPClient() (*http.Client, error) {
	tc, err := cp.EtcdClientTLS()
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 5 * time.Second}, nil
}

// DataDir is the absolute data directory.
func (cp *ControlPlane) DataDir() string { return cp.cfg.DataDir }

// LogDir holds one log file per component.
func (cp *ControlPlane) LogDir() string { return filepath.Join(cp.cfg.DataDir, "logs") }

// RESTConfig returns a cluster-admin (system:masters) client configuration.
func (cp *ControlPlane) RESTConfig() (*rest.Config, error) {
	c, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath())
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", cp.KubeconfigPath(), err)
	}
	c.QPS, c.Burst = 200, 400
	return c, nil
}

func (cp *ControlPlane) writeKubeconfig() error {
	read := func(name string) ([]byte, error) { return os.ReadFile(cp.pki.path(name)) }
	ca, err := read(caCertFile)
	if err != nil {
		return fmt.Errorf("reading CA: %w", err)
	}
	crt, err := read(adminCertFile)
	if err != nil {
		return fmt.Errorf("reading admin certificate: %w", err)
	}
	key, err := read(adminKeyFile)
	if err != nil {
		return fmt.Errorf("reading admin key: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[ClusterName] = &clientcmdapi.Cluster{Server: cp.URL(), CertificateAuthorityData: ca}
	kc.AuthInfos[ClusterName] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	kc.Contexts[ClusterName] = &clientcmdapi.Context{Cluster: ClusterName, AuthInfo: ClusterName, Namespace: "default"}
	kc.CurrentContext = ClusterName
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return writePrivateFile(cp.KubeconfigPath(), data)
}

func (cp *ControlPlane) newProcess(name string, args ...string) *process {
	return &process{
		name:    name,
		path:    filepath.Join(cp.cfg.BinDir, name),
		args:    args,
		logPath: filepath.Join(cp.LogDir(), name+".log"),
	}
}

// etcd serves clients and its (single) peer over TLS on loopback, and
// accepts only certificates signed by the etcd CA: without it, any local user
// could read and write every object, Secrets included. There is no separate
// metrics listener; /metrics and /health on the client port need a client
// certificate like everything else there.
func (cp *ControlPlane) etcd(clientURL string) *process {
	p := cp.pki.path
	peerURL := cp.EtcdPeerURL()
	args := []string{
		"--cert-file=" + p(etcdServerCertFile),
		"--key-file=" + p(etcdServerKeyFile),
		"--trusted-ca-file=" + p(etcdCACertFile),
		"--client-cert-auth=true",
		"--peer-cert-file=" + p(etcdServerCertFile),
		"--peer-key-file=" + p(etcdServerKeyFile),
		"--peer-trusted-ca-file=" + p(etcdCACertFile),
		"--peer-client-cert-auth=true",
		"--name=converge",
		"--data-dir=" + filepath.Join(cp.cfg.DataDir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=converge=" + peerURL,
		"--listen-metrics-urls=",
		"--quota-backend-bytes=" + strconv.Itoa(4<<30),
		"--log-level=warn",
	}
	if cp.cfg.Ephemeral {
		args = append(args, "--unsafe-no-fsync=true")
	}
	return cp.newProcess(Etcd, args...)
}

func (cp *ControlPlane) apiserver(etcdURL string) *process {
	p := cp.pki.path
	admission := "--disable-admission-plugins=ServiceAccount"
	if cp.cfg.ControllerManager {
		// The service-account controllers create the default ServiceAccount
		// the admission plugin needs.
		admission = "--enable-admission-plugins=ServiceAccount"
	}
	return cp.newProcess(APIServer,
		"--etcd-servers="+etcdURL,
		"--etcd-cafile="+p(etcdCACertFile),
		"--etcd-certfile="+p(etcdClientCertFile),
		"--etcd-keyfile="+p(etcdClientKeyFile),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// 1.37 refuses a loopback address for the kubernetes Service's
		// endpoints; nothing in a local cluster dials it.
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(cp.cfg.APIServerPort),
		"--cert-dir="+cp.pki.dir,
		"--tls-cert-file="+p(servingCertFile),
		"--tls-private-key-file="+p(servingKeyFile),
		"--client-ca-file="+p(caCertFile),
		"--service-cluster-ip-range="+serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p(saPubFile),
		"--service-account-signing-key-file="+p(saKeyFile),
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		admission,
		"--profiling=false",
		"--v=1",
	)
}

func (cp *ControlPlane) componentKubeconfigArgs() []string {
	kc := cp.KubeconfigPath()
	return []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc}
}

func (cp *ControlPlane) controllerManager() *process {
	args := append(cp.componentKubeconfigArgs(),
		"--leader-elect=false",
		"--secure-port=0",
		// Every controller that is on by default; the service-account key
		// lets the token controller sign tokens.
		"--controllers=*",
		"--service-account-private-key-file="+cp.pki.path(saKeyFile),
		"--root-ca-file="+cp.pki.path(caCertFile),
		"--use-service-account-credentials=false",
		"--cluster-cidr="+podCIDR,
		"--service-cluster-ip-range="+serviceCIDR,
		"--node-monitor-grace-period=40s",
		"--concurrent-gc-syncs=20",
		"--v=1",
	)
	args = append(args, cp.cfg.ControllerManagerArgs...)
	return cp.newProcess(ControllerManager, args...)
}

func (cp *ControlPlane) scheduler() *process {
	args := append(cp.componentKubeconfigArgs(), "--leader-elect=false", "--secure-port=0", "--v=1")
	return cp.newProcess(Scheduler, args...)
}

func (cp *ControlPlane) kwok() (*process, error) {
	stages := filepath.Join(cp.cfg.DataDir, "kwok-stages.yaml")
	if err := writePrivateFile(stages, kwokStages); err != nil {
		return nil, err
	}
	return cp.newProcess(Kwok,
		"--kubeconfig="+cp.KubeconfigPath(),
		"--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"=fake",
		"--cidr="+podCIDR,
		"--node-ip=127.0.0.1",
		"--server-address=",
		"--node-lease-duration-seconds=40",
	), nil
}

// waitAPIServer polls /readyz with the admin credentials.
func (cp *ControlPlane) waitAPIServer(ctx context.Context) error {
	tr, err := rest.TransportFor(cp.rest)
	if err != nil {
		return fmt.Errorf("building API client: %w", err)
	}
	return waitHTTP(ctx, cp.URL()+"/readyz?verbose", &http.Client{Transport: tr, Timeout: 5 * time.Second})
}

func waitHTTP(ctx context.Context, url string, c *http.Client) error {
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %s%s", url, resp.Status, failedChecks(string(body)))
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// failedChecks lists the "[-]name failed" lines of a /readyz body.
func failedChecks(body string) string {
	var failed []string
	for _, l := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(l, "[-]"); ok {
			failed = append(failed, strings.Fields(name)[0])
		}
	}
	if len(failed) == 0 {
		return ""
	}
	return "; not ready: " + strings.Join(failed, ", ")
}

// FreePort returns a port on 127.0.0.1 that is free now, for a process
// that binds it a little later (etcd, kube-apiserver, a listener of the
// manager).
//
// It picks below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range) where it can: a port the kernel handed out
// for ":0" is handed out again for the source port of any outgoing
// connection, and with the parallel test suites' hundreds of connections one
// of them took such a port before its listener bound it ("address already in
// use"). Below the range only another explicit choice can collide. Where the
// range starts too low it falls back to asking the kernel.
func FreePort() (int, error) {
	if lo := ephemeralLow(); lo > freePortLow+1000 {
		for range 100 {
			port := freePortLow + rand.IntN(lo-freePortLow) //nolint:gosec // not a secret: spreads choices
			if portFree(port) == nil {
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePortLow is the lowest port FreePort picks: above the well-known
// services' usual ports.
const freePortLow = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, or 0 when
// it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

func portFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

func joinNames(names []string) string { return strings.Join(names, ", ") }
