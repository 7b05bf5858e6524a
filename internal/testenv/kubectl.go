package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// KubectlApply applies manifest (YAML, one or more documents) in namespace
// ns with the environment's kubectl and admin kubeconfig, as a person would;
// the test fails with kubectl's output when it is refused.
func (e *Environment) KubectlApply(t testing.TB, ns, manifest string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.BinDir, "kubectl"), "--kubeconfig", e.KubeconfigPath, "-n", ns, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}
