// Package testcluster runs a real Kubernetes control plane for the tests of
// a controller built on Converge: etcd and kube-apiserver (and, when asked,
// kube-controller-manager, whose garbage collector deletes what owner
// references say), the controller's CRDs installed before any controller
// starts, and its admission webhooks installed and pointed at a local
// webhook server with a certificate the API server trusts. It is what
// Converge's own suites use (the same binaries and start-up code), offered
// to other modules; it never fakes the API server.
//
// Use it from TestMain:
//
//	var cluster *testcluster.Cluster
//
//	func TestMain(m *testing.M) {
//		os.Exit(testcluster.Main(m, testcluster.Options{CRDDirectoryPaths: []string{"config/crd"}}, &cluster))
//	}
//
//	func TestSomething(t *testing.T) {
//		testcluster.Need(t, cluster)
//		ns := cluster.NewNamespace(t)
//		...
//	}
//
// The binaries come from $CONVERGE_BIN_DIR, else from the first bin/
// directory holding kube-apiserver found walking up from the working
// directory (`make tools` in a Converge checkout builds them). When they are
// missing the suite is skipped with a loud message, except under CI=true,
// where that is a failure.
package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/converge-dev/converge/internal/localcp"
	"github.com/converge-dev/converge/internal/webhookcert"
)

// Options choose what a suite needs.
type Options struct {
	// ControllerManager starts kube-controller-manager: garbage collection
	// (owned objects deleted with their owner), namespaces, ServiceAccounts.
	ControllerManager bool
	// CRDDirectoryPaths are directories (or files) of CustomResourceDefinition
	// manifests, installed and established before any controller starts.
	CRDDirectoryPaths []string
	// WebhookManifests are files of Validating/MutatingWebhookConfigurations
	// as controller-gen writes them (clientConfig.service); each is installed
	// with its clientConfig pointed at the suite's webhook server
	// (Cluster.WebhookServer) and the CA that signed its certificate.
	WebhookManifests []string
}

// Cluster is a running control plane.
type Cluster struct {
	// Config is a cluster-admin client configuration.
	Config *rest.Config
	// Client is a direct (uncached) client with client-go's scheme and the
	// CRD types; add your scheme's types with NewClient.
	Client client.Client

	cp          *localcp.ControlPlane
	dir         string
	webhookPort int
	certDir     string
}

var skipReason string

// Main starts the cluster, runs the tests and stops the cluster; it returns
// the exit code for os.Exit.
func Main(m *testing.M, o Options, c **Cluster) int {
	flag.Parse()
	cl, err := Start(context.Background(), o) //nolint:forbidigo // TestMain has no test context
	if err != nil {
		var ue *localcp.UserError
		if errors.As(err, &ue) && strings.Contains(ue.Problem, "binaries missing") && os.Getenv("CI") == "" {
			skipReason = "control plane not available: " + err.Error()
			fmt.Fprintf(os.Stderr, "\n*** SKIPPING control-plane tests: %v ***\n\n", err)
			return m.Run()
		}
		fmt.Fprintf(os.Stderr, "testcluster: starting the control plane: %v\n", err)
		return 1
	}
	*c = cl
	code := m.Run()
	if err := cl.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testcluster: stopping: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Need skips t when Main could not start the cluster (outside CI only).
func Need(t testing.TB, c *Cluster) {
	t.Helper()
	if c == nil {
		if skipReason == "" {
			skipReason = "the cluster was not started (is TestMain calling testcluster.Main?)"
		}
		t.Skip(skipReason)
	}
}

// Start starts a control plane in a temporary directory on free ports and
// installs o's CRDs and webhooks.
func Start(ctx context.Context, o Options) (_ *Cluster, retErr error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	crds, err := readCRDs(o.CRDDirectoryPaths)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "testcluster-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	c := &Cluster{dir: dir, certDir: filepath.Join(dir, "webhook")}
	if c.webhookPort, err = localcp.FreePort(); err != nil {
		return nil, err
	}
	cp, err := localcp.Start(ctx, localcp.Config{
		DataDir: filepath.Join(dir, "cp"), BinDir: bin, Ephemeral: true,
		ControllerManager: o.ControllerManager,
		// The garbage collector discovers kinds at its start (then every
		// 30 s): the CRDs go in first.
		BeforeControllers: func(ctx context.Context, cfg *rest.Config) error {
			cl, err := client.New(cfg, client.Options{Scheme: scheme()})
			if err != nil {
				return err
			}
			return installCRDs(ctx, cl, crds)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	c.cp = cp
	defer func() {
		if retErr != nil {
			_ = cp.Stop()
		}
	}()
	if c.Config, err = cp.RESTConfig(); err != nil {
		return nil, err
	}
	if c.Client, err = c.NewClient(scheme()); err != nil {
		return nil, err
	}
	if len(o.WebhookManifests) > 0 {
		if err := c.installWebhooks(ctx, o.WebhookManifests); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Stop stops the control plane and removes its data.
func (c *Cluster) Stop() error {
	if err := c.cp.Stop(); err != nil {
		return fmt.Errorf("%w (logs kept in %s)", err, c.cp.LogDir())
	}
	return os.RemoveAll(c.dir)
}

// KubeconfigPath is an admin kubeconfig of the cluster, for kubectl.
func (c *Cluster) KubeconfigPath() string { return c.cp.KubeconfigPath() }

// NewClient returns a direct (uncached) admin client with scheme s.
func (c *Cluster) NewClient(s *runtime.Scheme) (client.Client, error) {
	return client.New(c.Config, client.Options{Scheme: s})
}

// WebhookServer is the webhook server a suite's manager must run
// (ctrl.Options.WebhookServer) for the installed WebhookManifests to reach
// it: 127.0.0.1 on the cluster's webhook port, with the certificate the API
// server was told to trust.
func (c *Cluster) WebhookServer() webhook.Server {
	return webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: c.webhookPort, CertDir: c.certDir})
}

// NewNamespace creates a namespace for one test and deletes it when the test
// ends.
func (c *Cluster) NewNamespace(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.TrimRight(name, "-") + "-"}}
	if err := c.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		_ = c.Client.Delete(ctx, ns)
	})
	return ns.Name
}

// RunManager starts mgr and stops it when the test ends, failing the test
// if the manager returns an error.
func RunManager(t testing.TB, mgr manager.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// BinDir finds the control-plane binaries: $CONVERGE_BIN_DIR, else the
// first bin/ holding kube-apiserver walking up from the working directory.
func BinDir() (string, error) {
	if d := os.Getenv("CONVERGE_BIN_DIR"); d != "" {
		return filepath.Abs(d)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "bin", "kube-apiserver")); err == nil {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			// localcp names the missing binaries and how to build them.
			return filepath.Join(dir, "bin"), nil
		}
		dir = parent
	}
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = apiextensionsv1.AddToScheme(s)
	return s
}

// manifests reads the YAML documents of paths (files, or directories of
// .yaml files).
func manifests(paths []string) ([][]byte, error) {
	var docs [][]byte
	for _, p := range paths {
		files := []string{p}
		if st, err := os.Stat(p); err != nil {
			return nil, err
		} else if st.IsDir() {
			if files, err = filepath.Glob(filepath.Join(p, "*.yaml")); err != nil {
				return nil, err
			}
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
			for {
				doc, err := r.Read()
				if err != nil {
					break
				}
				if strings.TrimSpace(string(doc)) != "" {
					docs = append(docs, doc)
				}
			}
		}
	}
	return docs, nil
}

func readCRDs(paths []string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	docs, err := manifests(paths)
	if err != nil {
		return nil, fmt.Errorf("reading CRDs: %w", err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, d := range docs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := utilyaml.Unmarshal(d, crd); err != nil {
			return nil, fmt.Errorf("reading CRDs: %w", err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("reading CRDs: a %q where a CustomResourceDefinition was expected", crd.Kind)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

func installCRDs(ctx context.Context, c client.Client, crds []*apiextensionsv1.CustomResourceDefinition) error {
	for _, crd := range crds {
		if err := c.Create(ctx, crd.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CustomResourceDefinition %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
				return false, nil //nolint:nilerr // retried until the timeout
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition %s not established: %w", crd.Name, err)
		}
	}
	return nil
}

// installWebhooks writes a serving certificate for 127.0.0.1 to the webhook
// server's directory and installs the webhook configurations of files,
// pointed at that server and trusting its CA.
func (c *Cluster) installWebhooks(ctx context.Context, files []string) error {
	b, err := webhookcert.Issue([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.certDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.certDir, "tls.crt"), b.Cert, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.certDir, "tls.key"), b.Key, 0o600); err != nil {
		return err
	}
	docs, err := manifests(files)
	if err != nil {
		return fmt.Errorf("reading webhook manifests: %w", err)
	}
	point := func(cc *admissionregistrationv1.WebhookClientConfig) {
		path := "/"
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		url := fmt.Sprintf("https://127.0.0.1:%d%s", c.webhookPort, path)
		*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: b.CACert}
	}
	for _, d := range docs {
		var meta metav1.TypeMeta
		if err := utilyaml.Unmarshal(d, &meta); err != nil {
			return err
		}
		var obj client.Object
		switch meta.Kind {
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := utilyaml.Unmarshal(d, v); err != nil {
				return err
			}
			for i := range v.Webhooks {
				point(&v.Webhooks[i].ClientConfig)
			}
			obj = v
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := utilyaml.Unmarshal(d, m); err != nil {
				return err
			}
			for i := range m.Webhooks {
				point(&m.Webhooks[i].ClientConfig)
			}
			obj = m
		default:
			return fmt.Errorf("reading webhook manifests: a %q where a webhook configuration was expected", meta.Kind)
		}
		if err := c.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", meta.Kind, obj.GetName(), err)
		}
	}
	return nil
}

// Kstatus reads obj from the API server as unstructured and computes its
// kstatus (sigs.k8s.io/cli-utils), as kubectl wait, Flux, kpt and
// Converge's Sync read it: a test asserts that tools see what it means.
func Kstatus(ctx context.Context, c client.Client, obj client.Object) (*kstatus.Result, error) {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
		return nil, err
	}
	return kstatus.Compute(u)
}
