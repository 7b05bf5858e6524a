// Package gitfixture writes the git repositories and objects a GitOps
// benchmark syncs from (bench/gitops, bench/scale), and the plain
// server-side-apply loop that is a Sync's floor.
package gitfixture

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ConfigMap is a ConfigMap named name with data key=v.
func ConfigMap(name, v string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetName(name)
	_ = unstructured.SetNestedStringMap(u.Object, map[string]string{"key": v}, "data")
	return u
}

// Repo writes a bare git repository root/name.git with one directory per
// key of dirs (its objects in one objects.yaml) and returns its file:// URL.
func Repo(root, name string, dirs map[string][]*unstructured.Unstructured) (string, error) {
	work := filepath.Join(root, name)
	for dir, objs := range dirs {
		var buf bytes.Buffer
		for _, u := range objs {
			b, err := yaml.Marshal(u.Object)
			if err != nil {
				return "", fmt.Errorf("marshalling %s: %w", u.GetName(), err)
			}
			buf.WriteString("---\n")
			buf.Write(b)
		}
		p := filepath.Join(work, dir, "objects.yaml")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			return "", err
		}
	}
	bare := filepath.Join(root, name+".git")
	for _, step := range []struct {
		dir  string
		args []string
	}{
		{work, []string{"init", "-q", "-b", "main"}},
		{work, []string{"add", "-A"}},
		{work, []string{"commit", "-q", "-m", "objects"}},
		{root, []string{"clone", "-q", "--bare", work, bare}},
	} {
		if err := Git(step.dir, step.args...); err != nil {
			return "", err
		}
	}
	return "file://" + bare, nil
}

// Git runs git in dir with a fixed author.
func Git(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=b@example.com",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=b@example.com")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %v: %w: %s", args, err, out)
	}
	return nil
}

// ApplyLoop applies objs into ns with a plain server-side-apply loop over
// workers goroutines (field manager "bench-floor"): a Sync's floor.
func ApplyLoop(ctx context.Context, c client.Client, ns string, objs []*unstructured.Unstructured, workers int) error {
	work := make(chan *unstructured.Unstructured)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for u := range work {
				u = u.DeepCopy()
				u.SetNamespace(ns)
				if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("bench-floor"), client.ForceOwnership); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("applying %s: %w", u.GetName(), err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, u := range objs {
		work <- u
	}
	close(work)
	wg.Wait()
	return first
}
