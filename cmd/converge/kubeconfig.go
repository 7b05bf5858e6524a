package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// localKubeconfig is what `converge up` writes in the working directory.
const localKubeconfig = ".converge/kubeconfig"

// restConfig resolves the cluster as every verb does: --kubeconfig, then
// $KUBECONFIG, then .converge/kubeconfig (so verbs work right after
// `make up`), then the in-cluster configuration.
func restConfig(flag string) (*rest.Config, error) {
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
			return nil, errors.New("no cluster: pass --kubeconfig, set KUBECONFIG, or run `make up` first")
		}
		return cfg, err
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}
