package whycli_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/replicas"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/whycli"
)

var (
	env      *testenv.Environment
	converge string // the built binary
)

// The SQL instance, Database, PKI, workloads and machine (Machine, KwokMachine,
// MachineBMC, MachineUpgrade) controllers run against a real API server, with
// one kwok node (a KwokMachine's Node becomes Ready); the verbs are run
// through the built binary, as a person runs them.
func TestMain(m *testing.M) {
	code := testenv.Main(m, testenv.Options{Nodes: 1, Manager: func(o *setup.Options) {
		o.Controllers = []string{"postgresinstance", "database", "issuer", "clusterissuer", "certificate", "certificaterequest",
			"basicdeployment", "basicreplicaset", "machine", "kwokmachine", "machinebmc", "machineupgrade"}
	}}, &env)
	if converge != "" {
		// The built binary (~150 MB) goes with the run that built it.
		_ = os.RemoveAll(filepath.Dir(converge))
	}
	os.Exit(code)
}

// binary builds converge once per run.
func binary(t *testing.T) string {
	t.Helper()
	if converge != "" {
		return converge
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "converge-why-")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := replicas.Build(t.Context(), root, dir)
	if err != nil {
		t.Fatal(err)
	}
	converge = exe
	return exe
}

// cv runs converge with the kubeconfig kc in namespace ns; it returns the
// output and the exit code.
func cv(t *testing.T, kc, ns string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary(t), append(args, "--kubeconfig", kc, "-n", ns)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("running converge %v: %v", args, err)
	return "", -1
}

// TestWhyDatabaseNamesTheMissingAdminSecret: a Database on a PostgresInstance
// whose admin Secret does not exist. why on the Database names the Secret as
// the root cause (through the instance, AdminSecretInvalid) and exits 2;
// tree lists the chain; tree --up on the Secret finds who needs it. Once the
// Secret exists (and the server is unreachable), the root cause moves to the
// instance.
func TestWhyDatabaseNamesTheMissingAdminSecret(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	port, err := testenv.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	env.KubectlApply(t, ns, fmt.Sprintf(`
apiVersion: sql.converge.dev/v1alpha1
kind: PostgresInstance
metadata: {name: pg}
spec: {host: 127.0.0.1, port: %d, adminSecretRef: {name: pg-admin}, tls: {mode: Disable}}
---
apiVersion: sql.converge.dev/v1alpha1
kind: Database
metadata: {name: orders}
spec:
  instanceRef: {apiVersion: sql.converge.dev/v1alpha1, kind: PostgresInstance, name: pg}
  databaseName: orders
  deletionPolicy: Retain
`, port))
	kc := env.KubeconfigPath

	var out string
	testenv.Eventually(g, func(g Gomega) {
		var code int
		out, code = cv(t, kc, ns, "why", "database/orders")
		g.Expect(code).To(Equal(2), out)
		g.Expect(out).To(ContainSubstring("needs PostgresInstance/pg"))
		g.Expect(out).To(ContainSubstring("AdminSecretInvalid"))
		g.Expect(out).To(ContainSubstring("Root cause: Secret/pg-admin in " + ns + " is NotFound"))
	}).Should(Succeed())
	t.Logf("converge why database/orders:\n%s", out)
	g.Expect(out).To(HavePrefix("Database/orders in " + ns + " is "))
	g.Expect(out).To(ContainSubstring("Next: kubectl -n " + ns + " create secret generic pg-admin"))

	tree, code := cv(t, kc, ns, "tree", "db/orders")
	g.Expect(code).To(Equal(0), tree)
	g.Expect(tree).To(MatchRegexp(`(?m)^NAMESPACE\s+NAME\s+STATUS\s+REASON\s+MESSAGE$`))
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+└─needs PostgresInstance/pg\s+(Failed|InProgress)\s+AdminSecretInvalid`))
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+  └─needs Secret/pg-admin\s+NotFound`))
	g.Expect(tree).NotTo(ContainSubstring("\x1b["), "no colour when not on a terminal")
	t.Logf("converge tree db/orders:\n%s", tree)

	up, code := cv(t, kc, ns, "tree", "postgresinstance/pg", "--up")
	g.Expect(code).To(Equal(0), up)
	g.Expect(up).To(ContainSubstring("└─needed by Database/orders"))

	js, code := cv(t, kc, ns, "tree", "database/orders", "-o", "json")
	g.Expect(code).To(Equal(0), js)
	var root struct {
		Ref      struct{ Kind, Name string }
		Status   string
		Children []struct {
			Why      string
			Ref      struct{ Kind, Name string }
			Children []struct {
				Why    string
				Status string
				Ref    struct{ Kind, Name string }
			}
		}
	}
	g.Expect(json.Unmarshal([]byte(js), &root)).To(Succeed(), js)
	g.Expect(root.Ref.Kind).To(Equal("Database"))
	g.Expect(root.Children).To(HaveLen(1))
	g.Expect(root.Children[0].Why).To(Equal("needs"))
	g.Expect(root.Children[0].Children).To(ContainElement(And(HaveField("Ref.Kind", "Secret"), HaveField("Status", "NotFound"))))

	// A Sync (no Sync controller runs here: the test writes the inventory
	// the controller would) applies the Database: tree follows the
	// inventory down and the Sync labels up.
	env.KubectlApply(t, ns, `
apiVersion: gitops.converge.dev/v1alpha1
kind: Sync
metadata: {name: app}
spec: {sourceRef: {name: repo}, prune: false, serviceAccountName: deployer}
`)
	patch := exec.Command(filepath.Join(env.BinDir, "kubectl"), "--kubeconfig", env.KubeconfigPath, "-n", ns, "patch", "sync", "app",
		"--subresource=status", "--type=merge", "-p",
		`{"status":{"inventory":[{"group":"sql.converge.dev","version":"v1alpha1","kind":"Database","namespace":"`+ns+`","name":"orders"}]}}`)
	pout, err := patch.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(pout))
	label := exec.Command(filepath.Join(env.BinDir, "kubectl"), "--kubeconfig", env.KubeconfigPath, "-n", ns, "label", "database", "orders",
		"gitops.converge.dev/sync-name=app", "gitops.converge.dev/sync-namespace="+ns)
	lout, err := label.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(lout))
	tree, code = cv(t, kc, ns, "tree", "sync/app")
	g.Expect(code).To(Equal(0), tree)
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+├─needs GitRepository/repo\s+NotFound`))
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+└─applies Database/orders\s+InProgress\s+InstanceNotReady`))
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+    └─needs Secret/pg-admin\s+NotFound`))
	up, code = cv(t, kc, ns, "tree", "db/orders", "--up")
	g.Expect(code).To(Equal(0), up)
	g.Expect(up).To(ContainSubstring("└─applied by Sync/app"))
	// The Sync's own need comes first: its source is missing.
	out, code = cv(t, kc, ns, "why", "sync/app")
	g.Expect(code).To(Equal(2), out)
	g.Expect(out).To(ContainSubstring("Root cause: GitRepository/repo in " + ns + " is NotFound"))
	g.Expect(out).To(ContainSubstring("Next: converge reconcile gitrepository repo -n " + ns))

	// The Secret exists now: the instance cannot reach its server, and is
	// the root cause.
	g.Expect(env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-admin"},
		StringData: map[string]string{"username": "postgres", "password": "x"}})).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		out, code := cv(t, kc, ns, "why", "database/orders")
		g.Expect(code).To(Equal(2), out)
		g.Expect(out).To(ContainSubstring("Root cause: PostgresInstance/pg in " + ns))
		g.Expect(out).To(ContainSubstring("Unreachable"))
		g.Expect(out).NotTo(ContainSubstring("Root cause: Secret"))
	}).Should(Succeed())
}

// TestWhyCertificateNamesTheMissingCASecret: a Certificate whose CA Issuer's
// Secret is missing; why names the Secret, through the Issuer
// (CASecretInvalid). A Current object answers exit 0.
func TestWhyCertificateNamesTheMissingCASecret(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	env.KubectlApply(t, ns, `
apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata: {name: ca}
spec: {ca: {secretName: ca-key-pair}}
---
apiVersion: pki.converge.dev/v1alpha1
kind: Certificate
metadata: {name: web}
spec: {secretName: web-tls, dnsNames: [web.example.com], issuerRef: {name: ca}}
---
apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata: {name: self}
spec: {selfSigned: {}}
`)
	kc := env.KubeconfigPath
	testenv.Eventually(g, func(g Gomega) {
		out, code := cv(t, kc, ns, "why", "certificate/web")
		g.Expect(code).To(Equal(2), out)
		g.Expect(out).To(ContainSubstring("needs Issuer/ca"))
		g.Expect(out).To(ContainSubstring("CASecretInvalid"))
		g.Expect(out).To(ContainSubstring("Root cause: Secret/ca-key-pair in " + ns + " is NotFound"))
		g.Expect(out).To(ContainSubstring("Next: kubectl -n " + ns + " create secret generic ca-key-pair"))
	}).Should(Succeed())

	testenv.Eventually(g, func(g Gomega) {
		out, code := cv(t, kc, ns, "why", "issuer/self")
		g.Expect(code).To(Equal(0), out)
		g.Expect(out).To(ContainSubstring("Issuer/self in " + ns + " is Current"))
		g.Expect(out).To(ContainSubstring("Everything it applies, owns and needs is Current."))
	}).Should(Succeed())

	out, code := cv(t, kc, ns, "why", "certificate/missing")
	g.Expect(code).To(Equal(1), out)
	g.Expect(out).To(HavePrefix("converge: Certificate/" + ns + "/missing not found"))
	out, code = cv(t, kc, ns, "why", "frobnicator/x")
	g.Expect(code).To(Equal(1), out)
	g.Expect(out).To(ContainSubstring(`unknown kind "frobnicator"`))
}

// TestWhyBasicDeploymentFollowsWhatItOwns: a BasicDeployment whose Pod
// never starts (this control plane runs no scheduler and no kubelet, as a
// cluster with no room for it). why on the BasicDeployment follows "owns"
// down through its BasicReplicaSet to the Pod, names the Pod as the root
// cause and exits 2; tree lists the three levels; tree --up on the Pod
// finds its owners.
func TestWhyBasicDeploymentFollowsWhatItOwns(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	env.KubectlApply(t, ns, `
apiVersion: workloads.converge.dev/v1alpha1
kind: BasicDeployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: nginx, image: nginx:1.27}]}
`)
	kc := env.KubeconfigPath
	var out string
	testenv.Eventually(g, func(g Gomega) {
		var code int
		out, code = cv(t, kc, ns, "why", "bd/web")
		g.Expect(code).To(Equal(2), out)
		g.Expect(out).To(ContainSubstring("BasicDeployment/web in " + ns + " is InProgress"))
		g.Expect(out).To(MatchRegexp(`owns BasicReplicaSet/web-\S+`))
		g.Expect(out).To(MatchRegexp(`owns Pod/web-\S+`))
		g.Expect(out).To(MatchRegexp(`Root cause: Pod/web-\S+ in ` + ns + ` is InProgress \(PodPending\)`))
		g.Expect(out).To(MatchRegexp(`Next: kubectl -n ` + ns + ` describe pod web-\S+`))
	}).Should(Succeed())
	t.Logf("why bd/web:\n%s", out)

	tree, code := cv(t, kc, ns, "tree", "bd/web")
	g.Expect(code).To(Equal(0), tree)
	g.Expect(tree).To(And(ContainSubstring("BasicDeployment/web"), MatchRegexp(`└─owns BasicReplicaSet/web-`), MatchRegexp(`└─owns Pod/web-`)))

	pods := &corev1.PodList{}
	g.Expect(env.Client.List(t.Context(), pods, client.InNamespace(ns))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1))
	up, code := cv(t, kc, ns, "tree", "--up", "pod/"+pods.Items[0].Name)
	g.Expect(code).To(Equal(0), up)
	g.Expect(up).To(And(MatchRegexp(`owned by BasicReplicaSet/web-`), ContainSubstring("owned by BasicDeployment/web")))
}

// TestWhyAsTenantSeesForbiddenNotTheOtherNamespace: a tenant's Certificate
// names a ClusterIssuer whose CA Secret (in converge-system) is missing. The
// admin's why names the missing Secret; the tenant's why, made with the
// tenant's own identity, shows what it may not read as Forbidden (it learns nothing of
// it, not even that it is missing) and does not crash: the tenant may not
// read the ClusterIssuer itself, so the chain stops there, as Forbidden.
func TestWhyAsTenantSeesForbiddenNotTheOtherNamespace(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "converge-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := env.NewNamespace(t)
	user := env.GrantTenant(t, ns, "tenant")
	issuer := "why-" + ns
	env.KubectlApply(t, ns, fmt.Sprintf(`
apiVersion: pki.converge.dev/v1alpha1
kind: ClusterIssuer
metadata: {name: %[1]s}
spec: {ca: {secretName: %[1]s-ca}}
---
apiVersion: pki.converge.dev/v1alpha1
kind: Certificate
metadata: {name: web}
spec: {secretName: web-tls, dnsNames: [web.example.com], issuerRef: {name: %[1]s, kind: ClusterIssuer}}
`, issuer))
	t.Cleanup(func() {
		_ = exec.Command(filepath.Join(env.BinDir, "kubectl"), "--kubeconfig", env.KubeconfigPath, "delete", "clusterissuer", issuer).Run()
	})

	testenv.Eventually(g, func(g Gomega) {
		out, code := cv(t, env.KubeconfigPath, ns, "why", "certificate/web")
		g.Expect(code).To(Equal(2), out)
		g.Expect(out).To(ContainSubstring("Root cause: Secret/" + issuer + "-ca in converge-system is NotFound"))
	}).Should(Succeed())

	// The tenant's kubeconfig: the admin's, impersonating the tenant.
	cfg, err := clientcmd.LoadFromFile(env.KubeconfigPath)
	g.Expect(err).NotTo(HaveOccurred())
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	tkc := filepath.Join(t.TempDir(), "tenant.kubeconfig")
	g.Expect(clientcmd.WriteToFile(*cfg, tkc)).To(Succeed())

	out, code := cv(t, tkc, ns, "why", "certificate/web")
	g.Expect(code).To(Equal(2), out)
	g.Expect(out).To(ContainSubstring("Root cause: ClusterIssuer/" + issuer + " is Forbidden"))
	g.Expect(out).NotTo(ContainSubstring("is NotFound"), "the tenant's reads stop where its rights stop")
	g.Expect(out).To(ContainSubstring("Next: ask your admin for read access (kubectl auth can-i get clusterissuers.pki.converge.dev " + issuer + ")"))

	tree, code := cv(t, tkc, ns, "tree", "certificate/web")
	g.Expect(code).To(Equal(0), tree)
	g.Expect(tree).To(MatchRegexp(`(?m)^\s+└─needs ClusterIssuer/` + issuer + `\s+Forbidden`))
	g.Expect(tree).NotTo(ContainSubstring("Secret/"+issuer), "nothing behind a Forbidden object is read")

	// Another namespace's object is Forbidden as the root itself.
	other := env.NewNamespace(t)
	env.KubectlApply(t, other, `
apiVersion: pki.converge.dev/v1alpha1
kind: Issuer
metadata: {name: theirs}
spec: {selfSigned: {}}
`)
	out, code = cv(t, tkc, other, "why", "issuer/theirs")
	g.Expect(code).To(Equal(2), out)
	g.Expect(out).To(ContainSubstring("is Forbidden"))
	g.Expect(out).NotTo(ContainSubstring("Current"))
}

// TestWhyUpgradeNamesTheBMCsMissingSecret: a MachineUpgrade over one
// running Machine whose MachineBMC's credentials Secret does not exist. The
// upgrade cordons and drains the Machine, then cannot power-cycle it and,
// after its one attempt, fails (StepFailed). The Machine itself runs
// (Current), yet why on the upgrade follows the needs path through it —
// upgrade → Machine → MachineBMC (SecretNotFound) → Secret — and names the
// missing Secret as the root cause, with the command to create it and then
// converge upgrade retry; tree lists the chain and the Machine's Node.
func TestWhyUpgradeNamesTheBMCsMissingSecret(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	env.KubectlApply(t, ns, `
apiVersion: infrastructure.converge.dev/v1alpha1
kind: KwokMachine
metadata: {name: m0}
---
apiVersion: machine.converge.dev/v1alpha1
kind: Machine
metadata: {name: m0, labels: {pool: why}}
spec:
  infrastructureRef: {apiVersion: infrastructure.converge.dev/v1alpha1, kind: KwokMachine, name: m0}
  image: v1
  version: "1.0"
---
apiVersion: bmc.converge.dev/v1alpha1
kind: MachineBMC
metadata: {name: m0}
spec: {machineRef: {name: m0}, authSecretRef: {name: m0-bmc}, protocols: [Redfish]}
`)
	kc := env.KubeconfigPath
	// The Machine runs (and is Current) before the upgrade starts.
	testenv.Eventually(g, func(g Gomega) {
		out, code := cv(t, kc, ns, "why", "machine/m0")
		g.Expect(code).To(Equal(0), out)
	}).Should(Succeed())
	env.KubectlApply(t, ns, `
apiVersion: upgrade.converge.dev/v1alpha1
kind: MachineUpgrade
metadata: {name: v2}
spec:
  selector: {matchLabels: {pool: why}}
  image: v2
  version: "2.0"
  strategy: {maxUnavailable: 1, maxAttempts: 1}
`)
	var out string
	testenv.Eventually(g, func(g Gomega) {
		var code int
		out, code = cv(t, kc, ns, "why", "machineupgrade/v2")
		g.Expect(code).To(Equal(2), out)
		g.Expect(out).To(HavePrefix("MachineUpgrade/v2 in " + ns + " is Failed (StepFailed)"))
		g.Expect(out).To(ContainSubstring("└─needs Machine/m0  Current"))
		g.Expect(out).To(MatchRegexp(`└─needs MachineBMC/m0  (InProgress|Failed) SecretNotFound`))
		g.Expect(out).To(ContainSubstring("└─needs Secret/m0-bmc  NotFound"))
		g.Expect(out).To(ContainSubstring("Root cause: Secret/m0-bmc in " + ns + " is NotFound"))
	}).Should(Succeed())
	t.Logf("converge why machineupgrade/v2:\n%s", out)
	g.Expect(out).To(ContainSubstring("Next: kubectl -n " + ns + " create secret generic m0-bmc"))
	g.Expect(out).To(ContainSubstring("Then: converge upgrade retry v2 -n " + ns))

	tree, code := cv(t, kc, ns, "tree", "upgrade/v2")
	g.Expect(code).To(Equal(0), tree)
	t.Logf("converge tree upgrade/v2:\n%s", tree)
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+MachineUpgrade/v2\s+Failed\s+StepFailed`))
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+└─needs Machine/m0\s+Current`))
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+├─needs KwokMachine/m0\s+`))
	g.Expect(tree).To(MatchRegexp(`(?m)^\s+├─needs Node/\S+\s+Current`))
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+└─needs MachineBMC/m0\s+(InProgress|Failed)\s+SecretNotFound`))
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+  └─needs Secret/m0-bmc\s+NotFound`))

	js, code := cv(t, kc, ns, "why", "machineupgrade/v2", "-o", "json")
	g.Expect(code).To(Equal(2), js)
	var ans struct {
		RootCause struct{ Ref struct{ Kind, Name string } }
		Next      string
		Then      string
	}
	g.Expect(json.Unmarshal([]byte(js), &ans)).To(Succeed(), js)
	g.Expect(ans.RootCause.Ref.Kind).To(Equal("Secret"))
	g.Expect(ans.Then).To(Equal("converge upgrade retry v2 -n " + ns))
}

// TestTreeReadsSiblingsWithOneList: a Sync whose inventory lists 20
// ConfigMaps (one of them missing) is read with one LIST of ConfigMaps, not
// a GET each, and its Events with one LIST for the namespace; the missing
// one is still NotFound. Requests are counted on the client's transport
// against the real API server.
func TestTreeReadsSiblingsWithOneList(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	env.KubectlApply(t, ns, `
apiVersion: gitops.converge.dev/v1alpha1
kind: Sync
metadata: {name: app}
spec: {sourceRef: {name: repo}, prune: false, serviceAccountName: deployer}
`)
	var inv []string
	for i := range 20 {
		name := fmt.Sprintf("cm-%d", i)
		if i > 0 {
			g.Expect(env.Client.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
		}
		inv = append(inv, `{"version":"v1","kind":"ConfigMap","namespace":"`+ns+`","name":"`+name+`"}`)
	}
	patch := exec.Command(filepath.Join(env.BinDir, "kubectl"), "--kubeconfig", env.KubeconfigPath, "-n", ns, "patch", "sync", "app",
		"--subresource=status", "--type=merge", "-p", `{"status":{"inventory":[`+strings.Join(inv, ",")+`]}}`)
	pout, err := patch.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(pout))

	var mu sync.Mutex
	requests := map[string]int{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			// .../namespaces/NS/RESOURCE[/NAME]: a GET without a name is a LIST.
			parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
			for i, p := range parts {
				if p != "namespaces" || i+2 >= len(parts) {
					continue
				}
				verb := r.Method
				if verb == http.MethodGet && i+3 >= len(parts) {
					verb = "LIST"
				}
				mu.Lock()
				requests[verb+" "+parts[i+2]]++
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	var out strings.Builder
	g.Expect(whycli.Tree(t.Context(), c, &out, ns, "sync/app", whycli.Options{})).To(Succeed())
	g.Expect(out.String()).To(MatchRegexp(`(?m)^` + ns + `\s+├─applies ConfigMap/cm-0\s+NotFound`))
	g.Expect(out.String()).To(MatchRegexp(`(?m)^` + ns + `\s+└─applies ConfigMap/cm-19\s+Current`))
	mu.Lock()
	defer mu.Unlock()
	g.Expect(requests).To(HaveKeyWithValue("LIST configmaps", 1), "%v", requests)
	g.Expect(requests).NotTo(HaveKey("GET configmaps"), "%v", requests)
	g.Expect(requests).To(HaveKeyWithValue("LIST events", 1), "%v", requests)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestWhyMachineNamesThePDBThatBlocksItsDrain: a Machine being deleted whose
// Node runs a Pod guarded by a PodDisruptionBudget allowing no disruption.
// The drain's eviction is really refused (429); why on the Machine names the
// PodDisruptionBudget (namespace/name) as the root cause, blocked by it,
// with its message and the next step; once the budget is gone the drain
// goes on and the Machine is deleted.
func TestWhyMachineNamesThePDBThatBlocksItsDrain(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	kc := env.KubeconfigPath
	m, node := runningKwokMachine(t, g, ns, "held", "")
	// A bystander budget selects no Pod the drain is refused for.
	env.KubectlApply(t, ns, guardedPodYAML(node)+"---"+
		podAndBudgetYAML(node, "unguarded", "other", "bystander", "maxUnavailable: 0, selector: {matchLabels: {app: nobody}}"))
	g.Expect(env.Client.Delete(t.Context(), m)).To(Succeed())
	// The drain really is refused: the controller says so.
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "held"}, m)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
		g.Expect(fmt.Sprint(conds)).To(ContainSubstring("a PodDisruptionBudget refuses the eviction of " + ns + "/guarded"))
	}).WithTimeout(2 * time.Minute).Should(Succeed())

	var out string
	testenv.Eventually(g, func(g Gomega) {
		var code int
		out, code = cv(t, kc, ns, "why", "machine/held")
		g.Expect(code).To(Equal(2), out)
		g.Expect(out).To(HavePrefix("Machine/held in " + ns + " is Terminating (Draining)"))
		g.Expect(out).To(MatchRegexp(`└─blocked by PodDisruptionBudget/guard  InProgress \S+`))
		g.Expect(out).To(ContainSubstring("Root cause: PodDisruptionBudget/guard in " + ns + " is InProgress (NoDisruptionAllowed)"))
	}).Should(Succeed())
	t.Logf("converge why machine/held:\n%s", out)
	g.Expect(out).To(ContainSubstring("allows no disruption (minAvailable 1;"))
	g.Expect(out).To(ContainSubstring("Next: make room for a disruption: scale up the Pods it selects, or lower its minAvailable / raise its maxUnavailable (kubectl -n " + ns + " edit poddisruptionbudget guard)"))
	g.Expect(out).NotTo(ContainSubstring("bystander"), "a budget selecting no refused Pod is not a cause")

	tree, code := cv(t, kc, ns, "tree", "machine/held")
	g.Expect(code).To(Equal(0), tree)
	g.Expect(tree).To(MatchRegexp(`(?m)^` + ns + `\s+└─blocked by PodDisruptionBudget/guard\s+InProgress`))
	// And the other way round: tree --up on the budget finds the Machine it
	// blocks; the budget selecting no refused Pod blocks nothing.
	up, code := cv(t, kc, ns, "tree", "pdb/guard", "--up")
	g.Expect(code).To(Equal(0), up)
	t.Logf("converge tree pdb/guard --up:\n%s", up)
	g.Expect(up).To(MatchRegexp(`(?m)^` + ns + `\s+└─blocks Machine/held\s+Terminating`))
	up, code = cv(t, kc, ns, "tree", "pdb/bystander", "--up")
	g.Expect(code).To(Equal(0), up)
	g.Expect(up).NotTo(ContainSubstring("└─blocks"))

	// The budget goes: the drain goes on by itself and the Machine is gone.
	pdb := &unstructured.Unstructured{}
	pdb.SetGroupVersionKind(schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"})
	pdb.SetNamespace(ns)
	pdb.SetName("guard")
	g.Expect(env.Client.Delete(t.Context(), pdb)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "held"}, m)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
	}).Should(Succeed())
}

// TestWhyUpgradeNamesThePDBThatBlocksItsDrain: a MachineUpgrade over one
// running Machine whose Node runs a Pod guarded by a PodDisruptionBudget
// allowing no disruption. The upgrade's drain is really refused (429, its
// Ready condition says so); why on the upgrade names the budget as the root
// cause, blocked by it, with the next step; tree --up on the budget finds
// the upgrade it blocks.
func TestWhyUpgradeNamesThePDBThatBlocksItsDrain(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	kc := env.KubeconfigPath
	_, node := runningKwokMachine(t, g, ns, "m0", "{pool: held}")
	env.KubectlApply(t, ns, guardedPodYAML(node)+`
---
apiVersion: upgrade.converge.dev/v1alpha1
kind: MachineUpgrade
metadata: {name: v2}
spec:
  selector: {matchLabels: {pool: held}}
  image: v2
  version: "2.0"
  strategy: {maxUnavailable: 1}
`)
	// The drain really is refused: the upgrade's conditions say so.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "upgrade.converge.dev", Version: "v1alpha1", Kind: "MachineUpgrade"})
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "v2"}, u)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		g.Expect(fmt.Sprint(conds)).To(ContainSubstring("a PodDisruptionBudget refuses the eviction of " + ns + "/guarded"))
	}).WithTimeout(2 * time.Minute).Should(Succeed())

	var out string
	testenv.Eventually(g, func(g Gomega) {
		var code int
		out, code = cv(t, kc, ns, "why", "machineupgrade/v2")
		g.Expect(code).To(Equal(2), out)
		g.Expect(out).To(HavePrefix("MachineUpgrade/v2 in " + ns + " is InProgress (DrainBlocked)"))
		g.Expect(out).To(MatchRegexp(`└─blocked by PodDisruptionBudget/guard  InProgress \S+`))
		g.Expect(out).To(ContainSubstring("Root cause: PodDisruptionBudget/guard in " + ns + " is InProgress (NoDisruptionAllowed)"))
	}).Should(Succeed())
	t.Logf("converge why machineupgrade/v2:\n%s", out)
	g.Expect(out).To(ContainSubstring("Next: make room for a disruption: scale up the Pods it selects, or lower its minAvailable / raise its maxUnavailable (kubectl -n " + ns + " edit poddisruptionbudget guard)"))

	up, code := cv(t, kc, ns, "tree", "poddisruptionbudget/guard", "--up")
	g.Expect(code).To(Equal(0), up)
	t.Logf("converge tree poddisruptionbudget/guard --up:\n%s", up)
	g.Expect(up).To(MatchRegexp(`(?m)^` + ns + `\s+└─blocks MachineUpgrade/v2\s+InProgress\s+DrainBlocked`))
}

// runningKwokMachine applies a KwokMachine and its Machine name (labels a
// YAML flow map, or "" for none) and waits until the Machine has a Node
// and why says it is Current; it returns the Machine and the Node's name.
func runningKwokMachine(t *testing.T, g Gomega, ns, name, labels string) (*unstructured.Unstructured, string) {
	t.Helper()
	if labels == "" {
		labels = "{}"
	}
	env.KubectlApply(t, ns, fmt.Sprintf(`
apiVersion: infrastructure.converge.dev/v1alpha1
kind: KwokMachine
metadata: {name: %[1]s}
---
apiVersion: machine.converge.dev/v1alpha1
kind: Machine
metadata: {name: %[1]s, labels: %[2]s}
spec:
  infrastructureRef: {apiVersion: infrastructure.converge.dev/v1alpha1, kind: KwokMachine, name: %[1]s}
  image: v1
  version: "1.0"
`, name, labels))
	m := &unstructured.Unstructured{}
	m.SetGroupVersionKind(schema.GroupVersionKind{Group: "machine.converge.dev", Version: "v1alpha1", Kind: "Machine"})
	var node string
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
		node, _, _ = unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		g.Expect(node).NotTo(BeEmpty())
		out, code := cv(t, env.KubeconfigPath, ns, "why", "machine/"+name)
		g.Expect(code).To(Equal(0), out)
	}).Should(Succeed())
	return m, node
}

// guardedPodYAML is a Pod "guarded" on node and the PodDisruptionBudget
// "guard" that allows it no disruption.
func guardedPodYAML(node string) string {
	return podAndBudgetYAML(node, "guarded", "guarded", "guard", "minAvailable: 1, selector: {matchLabels: {app: guarded}}")
}

// podAndBudgetYAML is a Pod on node labelled app and a
// PodDisruptionBudget with the given spec (a YAML flow map's inside).
func podAndBudgetYAML(node, pod, app, budget, spec string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app: %s}}
spec:
  nodeName: %s
  tolerations: [{operator: Exists}]
  containers: [{name: c, image: nginx}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: %s}
spec: {%s}
`, pod, app, node, budget, spec)
}
