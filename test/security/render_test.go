package security

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/artifact"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/testenv"
)

// renderMarker is planted where a confined render must not read; no object
// of the cluster may ever contain it.
const renderMarker = "converge-render-attack-marker-51c9"

// renderGitServer serves the test's repositories with a git daemon.
type renderGitServer struct {
	*gittest.Server
	url string
}

func newRenderGitServer(t *testing.T) *renderGitServer {
	t.Helper()
	s := gittest.NewServer(t)
	return &renderGitServer{Server: s, url: s.ServeDaemon(t)}
}

// source creates the tenant's GitRepository of repo (as the tenant) and
// returns it once it has an artifact of the last commit.
func (s *renderGitServer) source(t *testing.T, tn *tenant, repo *gittest.Repo, commit string) *gitopsv1alpha1.GitRepository {
	t.Helper()
	gr := &gitopsv1alpha1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: repo.Name},
		Spec:       gitopsv1alpha1.GitRepositorySpec{URL: s.url + repo.Name + ".git", Interval: &metav1.Duration{Duration: time.Hour}},
	}
	if err := tn.Client.Create(t.Context(), gr); err != nil {
		t.Fatalf("creating GitRepository %s as the tenant: %v", repo.Name, err)
	}
	if commit == "" {
		return gr
	}
	testenv.Eventually(NewWithT(t), func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(gr), gr)).To(Succeed())
		g.Expect(gr.Status.Artifact).NotTo(BeNil())
		g.Expect(gr.Status.Artifact.Revision).To(HaveSuffix(commit))
	}).Should(Succeed())
	return gr
}

// renderSync creates, as the tenant, a Sync of path in repo acting as the
// tenant's ServiceAccount.
func renderSync(t *testing.T, tn *tenant, name, repo, path string) *gitopsv1alpha1.Sync {
	t.Helper()
	sy := &gitopsv1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name},
		Spec: gitopsv1alpha1.SyncSpec{
			SourceRef:          gitopsv1alpha1.SourceReference{Name: repo},
			Path:               path,
			Prune:              ptr.To(true),
			ServiceAccountName: "tenant",
			TargetNamespace:    tn.NS,
			RetryInterval:      &metav1.Duration{Duration: 2 * time.Second},
		},
	}
	if err := tn.Client.Create(t.Context(), sy); err != nil {
		t.Fatalf("creating Sync %s as the tenant: %v", name, err)
	}
	return sy
}

// renderStalled waits until obj (read as the tenant) is Stalled with reason and
// Ready=False with the same reason, and returns the Stalled condition.
func renderStalled(t *testing.T, tn *tenant, obj client.Object, reason string) *metav1.Condition {
	t.Helper()
	return renderStalledWithin(t, tn, obj, reason, 30*time.Second)
}

// renderStalledWithin is renderStalled waiting up to timeout.
func renderStalledWithin(t *testing.T, tn *tenant, obj client.Object, reason string, timeout time.Duration) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	testenv.Eventually(NewWithT(t), func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		var conds []metav1.Condition
		switch o := obj.(type) {
		case *gitopsv1alpha1.Sync:
			conds = o.Status.Conditions
		case *gitopsv1alpha1.GitRepository:
			conds = o.Status.Conditions
		}
		c = meta.FindStatusCondition(conds, gitopsv1alpha1.StalledCondition)
		g.Expect(c).NotTo(BeNil(), "%s is not Stalled: %v", obj.GetName(), conds)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		ready := meta.FindStatusCondition(conds, gitopsv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(reason))
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
	return c
}

// renderExpectNoLeak checks that no Secret or ConfigMap of the cluster holds the
// marker and the tenant's namespace holds no Secret or ConfigMap but the
// ones the API server makes (kube-root-ca.crt).
func renderExpectNoLeak(t *testing.T, tn *tenant) {
	t.Helper()
	g := NewWithT(t)
	secrets := &corev1.SecretList{}
	g.Expect(env.Client.List(t.Context(), secrets)).To(Succeed())
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			g.Expect(string(v)).NotTo(ContainSubstring(renderMarker), "Secret %s/%s key %s", s.Namespace, s.Name, k)
		}
		g.Expect(s.Namespace != tn.NS || s.Type == corev1.SecretTypeServiceAccountToken).To(BeTrue(),
			"Secret %s appeared in the tenant's namespace", s.Name)
	}
	cms := &corev1.ConfigMapList{}
	g.Expect(env.Client.List(t.Context(), cms)).To(Succeed())
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			g.Expect(v).NotTo(ContainSubstring(renderMarker), "ConfigMap %s/%s key %s", cm.Namespace, cm.Name, k)
		}
		g.Expect(cm.Namespace != tn.NS || cm.Name == "kube-root-ca.crt").To(BeTrue(),
			"ConfigMap %s appeared in the tenant's namespace", cm.Name)
	}
}

// TestRenderCannotReadManagerFiles: generators, patches and symlinks that
// name a file of the manager's file system (the ServiceAccount token in
// production; a marker file here) are refused, by file and field, and the
// file's content reaches no object.
func TestRenderCannotReadManagerFiles(t *testing.T) {
	tn := newTenant(t)
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte(renderMarker), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newRenderGitServer(t)
	repo := s.NewRepo(t, "files")
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"
	repo.Commit(t, "attacks", map[string]string{
		"secret/kustomization.yaml": "secretGenerator:\n- name: stolen\n  files:\n  - token=" + secret + "\n",
		"env/kustomization.yaml":    "configMapGenerator:\n- name: stolen\n  envs:\n  - ../../../../../../../../.." + secret + "\n",
		"patch/kustomization.yaml":  "resources:\n- cm.yaml\npatches:\n- path: " + secret + "\n",
		"patch/cm.yaml":             cm,
		"link/kustomization.yaml":   "secretGenerator:\n- name: stolen\n  files:\n  - token=token\n",
		"plain/cm.yaml":             cm,
	})
	for _, d := range []string{"link", "plain"} {
		if err := os.Symlink(secret, filepath.Join(repo.Work(), d, "token")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(secret, filepath.Join(repo.Work(), "plain", "token.yaml")); err != nil {
		t.Fatal(err)
	}
	h := repo.CommitWork(t, "symlinks")
	s.source(t, tn, repo, h)

	for _, tc := range []struct{ path, want string }{
		{"secret", `secret/kustomization.yaml: secretGenerator[0].files: refused "` + secret + `": an absolute path`},
		{"env", "env/kustomization.yaml: configMapGenerator[0].envs: refused"},
		{"patch", `patch/kustomization.yaml: patches[0].path: refused "` + secret + `": an absolute path`},
		{"link", `link/kustomization.yaml: secretGenerator[0].files: refused "token": a symlink to an absolute path`},
		{"plain", "plain/token: refused: a symlink to an absolute path"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			sy := renderSync(t, tn, tc.path, repo.Name, tc.path)
			c := renderStalled(t, tn, sy, gitopsv1alpha1.RenderRefusedReason)
			NewWithT(t).Expect(c.Message).To(ContainSubstring(tc.want))
			NewWithT(t).Expect(c.Message).NotTo(ContainSubstring(renderMarker))
		})
	}
	renderExpectNoLeak(t, tn)
}

// renderCountingProxy listens on loopback, counts connections and forwards them to
// target (a real git daemon).
func renderCountingProxy(t *testing.T, target string) (addr string, hits *atomic.Int64) {
	t.Helper()
	hits = &atomic.Int64{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return l.Addr().String(), hits
}

// TestRenderNeverUsesTheNetwork: a generator, a resource and a base naming
// an HTTP URL (the metadata endpoint in production; a counting server here)
// or a git repository (a counting proxy in front of a real git daemon) are
// refused by field; the servers see zero requests, and URLs that would
// never answer hold no Sync worker: a good Sync applies while they stand.
func TestRenderNeverUsesTheNetwork(t *testing.T) {
	tn := newTenant(t)
	var httpHits atomic.Int64
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpHits.Add(1)
		_, _ = fmt.Fprintf(w, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fetched\ndata:\n  k: %s\n", renderMarker)
	}))
	t.Cleanup(web.Close)
	// Accepts and never answers: a fetch from it would hang.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hang.Close() })
	var hangHits atomic.Int64
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			hangHits.Add(1)
			t.Cleanup(func() { _ = c.Close() })
		}
	}()

	s := newRenderGitServer(t)
	remote := s.NewRepo(t, "remote")
	remote.Commit(t, "base", map[string]string{"deploy/kustomization.yaml": "resources:\n- cm.yaml\n",
		"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-remote\ndata:\n  k: " + renderMarker + "\n"})
	daemonAddr := strings.TrimSuffix(strings.TrimPrefix(s.url, "git://"), "/")
	gitAddr, gitHits := renderCountingProxy(t, daemonAddr)

	repo := s.NewRepo(t, "net")
	attacks := map[string]string{
		"metadata":    "configMapGenerator:\n- name: md\n  files:\n  - md=" + web.URL + "/latest/meta-data/\n",
		"resource":    "resources:\n- " + web.URL + "/cm.yaml\n",
		"gitbase":     "resources:\n- git://" + gitAddr + "/remote.git//deploy\n",
		"githttp":     "resources:\n- " + web.URL + "/remote.git//deploy?ref=main\n",
		"patch":       "resources:\n- cm.yaml\npatches:\n- path: " + web.URL + "/patch.yaml\n",
		"hang1":       "resources:\n- http://" + hang.Addr().String() + "/a.yaml\n",
		"hang2":       "configMapGenerator:\n- name: h\n  files:\n  - h=http://" + hang.Addr().String() + "/b\n",
		"hang3":       "resources:\n- https://" + hang.Addr().String() + "/repo.git//x\n",
		"hang4":       "openapi:\n  path: http://" + hang.Addr().String() + "/schema.json\n",
		"hang5":       "crds:\n- http://" + hang.Addr().String() + "/crd.yaml\n",
		"good/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: good\n",
	}
	files := map[string]string{"patch/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"}
	for k, v := range attacks {
		if strings.Contains(k, "/") {
			files[k] = v
			continue
		}
		files[k+"/kustomization.yaml"] = v
	}
	h := repo.Commit(t, "attacks", files)
	s.source(t, tn, repo, h)

	fields := map[string]string{
		"metadata": "configMapGenerator[0].files", "resource": "resources", "gitbase": "resources",
		"githttp": "resources", "patch": "patches[0].path", "hang1": "resources",
		"hang2": "configMapGenerator[0].files", "hang3": "resources", "hang4": "openapi.path", "hang5": "crds",
	}
	var syncs []*gitopsv1alpha1.Sync
	for name := range fields {
		syncs = append(syncs, renderSync(t, tn, name, repo.Name, name))
	}
	good := renderSync(t, tn, "good", repo.Name, "good")
	for _, sy := range syncs {
		c := renderStalled(t, tn, sy, gitopsv1alpha1.RenderRefusedReason)
		g := NewWithT(t)
		g.Expect(c.Message).To(ContainSubstring(sy.Name+"/kustomization.yaml: "+fields[sy.Name]+": refused"), sy.Name)
		g.Expect(c.Message).To(Or(ContainSubstring("a URL"), ContainSubstring("a remote git repository")), sy.Name)
	}
	testenv.Eventually(NewWithT(t), func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(good), good)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(good.Status.Conditions, gitopsv1alpha1.ReadyCondition)).To(BeTrue(), "%v", good.Status.Conditions)
	}).Should(Succeed())
	g := NewWithT(t)
	g.Expect(httpHits.Load()).To(BeZero(), "the HTTP server saw requests from renders")
	g.Expect(gitHits.Load()).To(BeZero(), "the git daemon saw requests from renders")
	g.Expect(hangHits.Load()).To(BeZero(), "the silent server saw connections from renders")
	// The good Sync's ConfigMap is the only object the tenant got.
	cms := &corev1.ConfigMapList{}
	g.Expect(tn.Client.List(t.Context(), cms, client.InNamespace(tn.NS))).To(Succeed())
	var names []string
	for _, cm := range cms.Items {
		if cm.Name != "kube-root-ca.crt" {
			names = append(names, cm.Name)
		}
	}
	g.Expect(names).To(ConsistOf("good"))
}

// TestRenderSymlinksToAnotherTenant: a repository committing a symlink to
// another tenant's stored artifact (its path in the manager's cache is
// known from the other tenant's status) renders nothing of it, through
// spec.path, a plain file or a kustomize resource.
func TestRenderSymlinksToAnotherTenant(t *testing.T) {
	a, b := newTenant(t), newTenant(t)
	s := newRenderGitServer(t)
	theirs := s.NewRepo(t, "theirs")
	h := theirs.Commit(t, "b", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b-config\ndata:\n  k: " + renderMarker + "\n"})
	gr := s.source(t, b, theirs, h)
	// Artifacts live at <cache>/<namespace>/<name>/<key>.
	key := artifact.Key(gr.Status.Artifact.Revision, gr.Status.Artifact.Digest)
	target := "../../../" + b.NS + "/" + gr.Name + "/" + key

	mine := s.NewRepo(t, "mine")
	mine.Commit(t, "kustomize", map[string]string{
		"kz/kustomization.yaml":    "resources:\n- ../up/app/cm.yaml\n",
		"kzdir/kustomization.yaml": "resources:\n- ../up/app\n",
		"plain/mine.yaml":          "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: mine\n",
	})
	if err := os.Symlink(target, filepath.Join(mine.Work(), "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+target+"/app/cm.yaml", filepath.Join(mine.Work(), "plain", "stolen.yaml")); err != nil {
		t.Fatal(err)
	}
	h = mine.CommitWork(t, "symlinks")
	s.source(t, a, mine, h)

	for _, tc := range []struct{ name, path, want string }{
		{"plain-path", "up/app", "up/app: refused: the symlink up leaves the repository"},
		{"plain-file", "plain", "plain/stolen.yaml: refused: the symlink plain/stolen.yaml leaves the repository"},
		{"kustomize-file", "kz", `kz/kustomization.yaml: resources: refused "../up/app/cm.yaml": the symlink up leaves the repository`},
		{"kustomize-dir", "kzdir", `kzdir/kustomization.yaml: resources: refused "../up/app": the symlink up leaves the repository`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sy := renderSync(t, a, tc.name, mine.Name, tc.path)
			c := renderStalled(t, a, sy, gitopsv1alpha1.RenderRefusedReason)
			NewWithT(t).Expect(c.Message).To(ContainSubstring(tc.want))
		})
	}
	renderExpectNoLeak(t, a)
	renderExpectNoLeak(t, b)
}
