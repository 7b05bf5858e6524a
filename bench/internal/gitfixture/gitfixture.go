// Package gitfixture writes the git repositories and objects a GitOps
// benchmark syncs from (bench/gitops, bench/scale), the commits and push
// webhooks it sends, and the plain server-side-apply loop that is a Sync's
// floor.
package gitfixture

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/internal/gitops/receiver"
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
// Its working copy, root/name (Dir), has the bare repository as origin
// (Push).
func Repo(root, name string, dirs map[string][]*unstructured.Unstructured) (string, error) {
	work := Dir(root, name)
	for dir, objs := range dirs {
		if err := Write(filepath.Join(work, dir, "objects.yaml"), objs...); err != nil {
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
		{work, []string{"remote", "add", "origin", bare}},
	} {
		if err := Git(step.dir, step.args...); err != nil {
			return "", err
		}
	}
	return "file://" + bare, nil
}

// Dir is the working copy of Repo's repository name under root.
func Dir(root, name string) string { return filepath.Join(root, name) }

// Write writes objs to path (its directory made if need be) as one YAML
// stream.
func Write(path string, objs ...*unstructured.Unstructured) error {
	var buf bytes.Buffer
	for _, u := range objs {
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return fmt.Errorf("marshalling %s: %w", u.GetName(), err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// Push commits every change to the tracked files of Repo's working copy
// root/name and pushes it to its bare repository.
func Push(root, name, message string) error {
	work := Dir(root, name)
	if err := Git(work, "commit", "-qam", message); err != nil {
		return err
	}
	return Git(work, "push", "-q", "origin", "main")
}

// Hook posts a GitHub push webhook, signed with token, for the
// GitRepository ns/name to the manager's push receiver at receiverURL
// (http://host:port), and wants it accepted (202).
func Hook(ctx context.Context, receiverURL, ns, name string, token []byte) error {
	body := []byte(`{"ref":"refs/heads/main"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/hook/gitrepository/%s/%s", receiverURL, ns, name), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", receiver.Sign(body, token))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("push webhook: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("push webhook answered %s", resp.Status)
	}
	return nil
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
