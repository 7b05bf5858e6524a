package security

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
)

// TestGitOpsBoundFlagsReachTheirLimits: the GitOps bounds an administrator
// sets (--gitops-max-fetch-size, --gitops-max-artifact-size,
// --gitops-max-manifests, --gitops-max-file-size) reach the fetch and the
// render through setup.New, as `converge run` builds the manager. The
// other bound tests run with the defaults, which the git and render
// packages also fall back to when given zero, so only this test fails when
// setup stops passing a flag on. A manager of its own shard, with bounds
// far below the defaults, refuses small repositories that the defaults
// accept, each naming the configured limit.
func TestGitOpsBoundFlagsReachTheirLimits(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	g := NewWithT(t)
	const (
		maxFetch    = 256 << 10
		maxArtifact = 64 << 10
		maxFile     = 4 << 10
		maxObjects  = 3
	)
	labels := startGitOpsShard(t, "bounds-"+tn.NS, func(o *setup.Options) {
		o.GitOps.MaxFetchSize = maxFetch
		o.GitOps.MaxArtifactSize = maxArtifact
		o.GitOps.MaxFileSize = maxFile
		o.GitOps.MaxManifests = maxObjects
	})

	s := newRenderGitServer(t)
	repo := func(name string, files map[string]string) *gitopsv1alpha1.GitRepository {
		r := s.NewRepo(t, name)
		r.Commit(t, name, files)
		gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name, Labels: labels},
			Spec: gitopsv1alpha1.GitRepositorySpec{URL: s.url + name + ".git", Interval: &metav1.Duration{Duration: time.Hour}}}
		g.Expect(tn.Client.Create(t.Context(), gr)).To(Succeed())
		return gr
	}
	// Incompressible: the pack is as large as the files.
	rnd := rand.New(rand.NewPCG(1, 2))
	noise := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.UintN(256))
		}
		return string(b)
	}

	// The fetch: five files of 60 KiB of noise, each below the object
	// limit, together above the fetch limit.
	fetch := map[string]string{}
	for i := range 5 {
		fetch["noise-"+strconv.Itoa(i)] = noise(60 << 10)
	}
	c := renderStalled(t, tn, repo("fetch", fetch), gitopsv1alpha1.ArtifactTooLargeReason)
	g.Expect(c.Message).To(ContainSubstring("exceed the limit of " + strconv.Itoa(maxFetch) + " bytes"))

	// The artifact: one file of 100 KiB of zeros (a small pack) above the
	// artifact limit.
	c = renderStalled(t, tn, repo("artifact", map[string]string{"zeros": strings.Repeat("\x00", 100<<10)}), gitopsv1alpha1.ArtifactTooLargeReason)
	g.Expect(c.Message).To(ContainSubstring("102400 bytes exceed the limit of " + strconv.Itoa(maxArtifact) + " bytes"))

	// The render: a repository within the fetch bounds, whose "many" path
	// renders more objects than allowed and whose "big" path holds a file
	// larger than allowed.
	var many strings.Builder
	for i := range maxObjects + 2 {
		many.WriteString("---\n" + configMap("", "many-"+strconv.Itoa(i), nil))
	}
	big := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  k: " + strings.Repeat("x", 8<<10) + "\n"
	repo("render", map[string]string{"many/cms.yaml": many.String(), "big/big.yaml": big})
	newSync := func(name, path string) *gitopsv1alpha1.Sync {
		sy := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name, Labels: labels},
			Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "render"}, Path: path, Prune: ptr.To(true),
				ServiceAccountName: tenantSA, TargetNamespace: tn.NS, RetryInterval: &metav1.Duration{Duration: 2 * time.Second}}}
		g.Expect(tn.Client.Create(t.Context(), sy)).To(Succeed())
		return sy
	}
	c = renderStalled(t, tn, newSync("many", "many"), gitopsv1alpha1.RenderLimitExceededReason)
	g.Expect(c.Message).To(ContainSubstring("objects rendered " + strconv.Itoa(maxObjects+2) + " exceeds the limit of " + strconv.Itoa(maxObjects)))
	c = renderStalled(t, tn, newSync("big", "big"), gitopsv1alpha1.RenderLimitExceededReason)
	g.Expect(c.Message).To(ContainSubstring("file big/big.yaml size " + strconv.Itoa(len(big)) + " exceeds the limit of " + strconv.Itoa(maxFile)))
	renderExpectNoLeak(t, tn)
}

// TestGitOpsRenderTimeoutFlagReachesTheRender: --gitops-render-timeout
// reaches the render through setup.New. With a timeout no render can meet
// (a nanosecond: the render's file system fails every read once it has
// passed) a Sync of one ConfigMap, which renders at once under the
// default of two minutes, is Stalled naming the configured timeout.
func TestGitOpsRenderTimeoutFlagReachesTheRender(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	g := NewWithT(t)
	shard := "render-timeout-" + tn.NS
	labels := startGitOpsShard(t, shard, func(o *setup.Options) {
		o.GitOps.RenderTimeout = time.Nanosecond
	})
	gr := tenantRepo(t, tn, map[string]string{"app/cm.yaml": configMap("", "quick", nil)}, setup.ShardLabel, shard)
	g.Expect(gr).NotTo(BeNil())
	sy := tenantSync(tn, "quick", "app")
	sy.Labels = labels
	g.Expect(tn.Client.Create(t.Context(), sy)).To(Succeed())
	c := renderStalled(t, tn, sy, gitopsv1alpha1.RenderLimitExceededReason)
	g.Expect(c.Message).To(ContainSubstring("the render did not finish within 1ns"))
	renderExpectNoLeak(t, tn)
}

// startGitOpsShard starts a manager built by setup.New with the chart's
// defaults, only the GitRepository and Sync controllers, its own cache
// directory and shard key shard, then applies set. It returns the labels
// that put an object in the shard, so the test's objects reach this manager
// only.
func startGitOpsShard(t *testing.T, shard string, set func(*setup.Options)) map[string]string {
	t.Helper()
	env.StartManager(t, func(o *setup.Options) {
		chartDefaults(o)
		o.Controllers = []string{"gitrepository", "sync"}
		o.ShardKey = shard
		o.GitOps.CacheDir = t.TempDir()
		set(o)
	})
	return map[string]string{setup.ShardLabel: shard}
}
