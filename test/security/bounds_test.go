package security

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/testenv"
)

// vmHWM is the peak resident set of this process (the manager runs in it),
// in bytes, from /proc/self/status.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("parsing VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// TestFetchOfHugeBlobIsBounded: a repository whose one blob is 2 GiB of
// zeros (a few MB compressed) is refused before a byte of it is written:
// the GitRepository is Stalled with the number, and the manager's peak
// memory grows far less than the chart's 512 Mi limit.
func TestFetchOfHugeBlobIsBounded(t *testing.T) {
	tn := newTenant(t)
	s := newRenderGitServer(t)
	repo := s.NewRepo(t, "huge")
	if err := os.MkdirAll(filepath.Join(repo.Work(), "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo.Work(), "app", "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: huge\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(repo.Work(), "zeros.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	_ = f.Close()
	// The fastest compression: the test makes the blob, the manager's
	// fetch is what is measured.
	for _, kv := range [][2]string{{"core.compression", "1"}, {"core.looseCompression", "1"}, {"pack.compression", "1"}} {
		if out, err := exec.Command(gittest.NeedGit(t), "-C", repo.Work(), "config", kv[0], kv[1]).CombinedOutput(); err != nil {
			t.Fatalf("git config: %v: %s", err, out)
		}
	}
	start := time.Now()
	h := repo.CommitWork(t, "2 GiB of zeros")
	t.Logf("committed the 2 GiB blob in %s", time.Since(start).Round(time.Second))

	// Reset the peak (Linux clear_refs 5), so the growth is this fetch's.
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	before := vmHWM(t)
	// Inflating 2 GiB to verify its hash takes a while on a busy machine:
	// a long fetch timeout, so the size limit is what ends it.
	gr := &gitopsv1alpha1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: repo.Name},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: s.url + repo.Name + ".git",
			Interval: &metav1.Duration{Duration: time.Hour}, Timeout: &metav1.Duration{Duration: 10 * time.Minute}},
	}
	g := NewWithT(t)
	g.Expect(tn.Client.Create(t.Context(), gr)).To(Succeed())
	start = time.Now()
	c := renderStalledWithin(t, tn, gr, gitopsv1alpha1.ArtifactTooLargeReason, 10*time.Minute)
	t.Logf("refused in %s", time.Since(start).Round(time.Second))
	after := vmHWM(t)
	g.Expect(c.Message).To(ContainSubstring(h))
	g.Expect(c.Message).To(ContainSubstring("an object (a file) of the fetch: 2147483648 bytes exceed the limit of 104857600 bytes"))
	g.Expect(gr.Status.Artifact).To(BeNil(), "nothing was stored")
	t.Logf("peak RSS %d MiB before the fetch, %d MiB after", before>>20, after>>20)
	g.Expect(after-before).To(BeNumerically("<", int64(128<<20)), "the fetch grew the manager's peak memory by %d MiB", (after-before)>>20)

	// A Sync of it applies nothing.
	sy := renderSync(t, tn, "huge", repo.Name, "app")
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(sy), sy)).To(Succeed())
		ready := meta.FindStatusCondition(sy.Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(gitopsv1alpha1.ArtifactFailedReason))
		g.Expect(ready.Message).To(ContainSubstring(gitopsv1alpha1.ArtifactTooLargeReason))
	}).Should(Succeed())
	renderExpectNoLeak(t, tn)
}

// TestRenderOfLargeFileIsBounded: a manifest larger than the manager's
// per-file limit (16 MiB by default) stalls the Sync with the number;
// nothing is applied.
func TestRenderOfLargeFileIsBounded(t *testing.T) {
	tn := newTenant(t)
	s := newRenderGitServer(t)
	repo := s.NewRepo(t, "large")
	big := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  k: " + strings.Repeat("x", 17<<20) + "\n"
	h := repo.Commit(t, "large", map[string]string{"app/big.yaml": big})
	s.source(t, tn, repo, h)
	sy := renderSync(t, tn, "large", repo.Name, "app")
	c := renderStalled(t, tn, sy, gitopsv1alpha1.RenderLimitExceededReason)
	NewWithT(t).Expect(c.Message).To(ContainSubstring("file app/big.yaml size " + strconv.Itoa(len(big)) + " exceeds the limit of 16777216"))
	renderExpectNoLeak(t, tn)
}
