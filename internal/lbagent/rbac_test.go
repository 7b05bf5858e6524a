package lbagent_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestAgentRunsWithItsOwnRBAC runs an agent as the ServiceAccount of
// config/lbagent/rbac.yaml (the rules the chart's DaemonSet gets too; see
// test/packaging), not as an administrator: it watches what it needs,
// takes the address's Lease, writes the Service's status once a probe
// through the address reached the backend, and on a graceful stop deletes
// its Leases. A rule missing from the file fails here.
func TestAgentRunsWithItsOwnRBAC(t *testing.T) {
	testenv.Need(t, env)
	lbtest.NeedNetwork(t)
	g := NewWithT(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 1, 1)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(topo.Close)
	g.Expect(topo.ServeHTTP(topo.Backends[0], topo.BackendIPs[0].String()+":8080", "be")).To(Succeed())
	ns := env.NewNamespace(t)
	applyAgentRBAC(t, ns)
	startIPAM(t)
	newPool(t, "rbac", ns, []string{"10.77.0.170-10.77.0.171"}, nil)
	newL2(t, "rbac")

	spec := agentSpec(topo, 0, ns)
	spec.Kubeconfig = impersonating(t, "system:serviceaccount:"+ns+":lb-agent")
	agent, err := topo.StartAgent(spec)
	g.Expect(err).NotTo(HaveOccurred())
	newService(t, ns, "web", nil)
	setEndpoints(t, ns, "web", endpoint{topo.BackendIPs[0].String(), true, false})
	c := waitReason(t, ns, "web", lbv1alpha1.ReachableReason)
	g.Expect(c.Message).To(ContainSubstring("announced by node " + spec.NodeName))
	announcedBy(t, ns, "web", "Node "+spec.NodeName+" announces 10.77.0.17")

	agent.Stop()
	var leases coordinationList
	g.Expect(env.Client.List(ctx, &leases, client.InNamespace(ns))).To(Succeed())
	for _, l := range leases.Items {
		g.Expect(ptr.Deref(l.Spec.HolderIdentity, "")).NotTo(Equal(spec.NodeName), "Lease %s left behind: the agent could not delete it", l.Name)
	}
}

// applyAgentRBAC creates config/lbagent/rbac.yaml's objects with the
// test's namespace for converge-system (deleted after the test).
func applyAgentRBAC(t *testing.T, ns string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "lbagent", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.ReplaceAll(string(data), "converge-system", ns))
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("decoding config/lbagent/rbac.yaml: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetNamespace() == "" && u.GetKind() != "ClusterRole" && u.GetKind() != "ClusterRoleBinding" {
			u.SetNamespace(ns)
		}
		if err := env.Client.Create(t.Context(), u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(t.Context()), u) })
	}
}

// impersonating writes a kubeconfig that acts as user (the test's admin
// credentials impersonating it): the API server authorizes as user.
func impersonating(t *testing.T, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
