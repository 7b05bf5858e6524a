package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/setup"
)

// localKubeconfig is what `converge up` writes in the working directory.
const localKubeconfig = ".converge/kubeconfig"

// restConfig resolves the cluster as every verb does: --kubeconfig, then
// $KUBECONFIG, then .converge/kubeconfig (so verbs work right after
// `make up`), then the in-cluster configuration.
func restConfig(flag string) (*rest.Config, error) {
	cfg, _, err := loadConfig(flag)
	return cfg, err
}

// loadConfig is restConfig that also returns the namespace of the
// kubeconfig's current context ("default" when it names none, or in-cluster
// the Pod's namespace).
func loadConfig(flag string) (*rest.Config, string, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: flag}
	path := flag
	if path == "" && os.Getenv("KUBECONFIG") != "" {
		path = os.Getenv("KUBECONFIG")
		rules = &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(path)}
	}
	if path == "" {
		if _, err := os.Stat(localKubeconfig); err == nil {
			path = localKubeconfig
			rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		}
	}
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, "", errors.New("no cluster: pass --kubeconfig, set KUBECONFIG, or run `make up` first")
		}
		ns := podNamespace()
		if ns == "" {
			ns = "default"
		}
		return cfg, ns, err
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace of kubeconfig %s: %w", path, err)
	}
	return cfg, ns, nil
}

// verbClient is the client and namespace a user verb acts with: the global
// --kubeconfig and -n/--namespace, as kubectl resolves them.
func verbClient(g *globalFlags) (client.Client, string, error) {
	cfg, ns, err := loadConfig(g.kubeconfig)
	if err != nil {
		return nil, "", err
	}
	if g.namespace != "" {
		ns = g.namespace
	}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, "", fmt.Errorf("building a client: %w", err)
	}
	return c, ns, nil
}
