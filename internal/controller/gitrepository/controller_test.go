package gitrepository_test

import (
	"fmt"
	"net"
	"sync"
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

func get(g Gomega, t *testing.T, gr *gitopsv1alpha1.GitRepository) *gitopsv1alpha1.GitRepository {
	out := &gitopsv1alpha1.GitRepository{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(gr), out)).To(Succeed())
	return out
}

func request(t *testing.T, gr *gitopsv1alpha1.GitRepository) string {
	t.Helper()
	v := time.Now().Format(time.RFC3339Nano)
	p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ReconcileRequestAnnotation, v)
	if err := env.Client.Patch(t.Context(), gr, client.RawPatch("application/merge-patch+json", p)); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestArtifactFollowsTheBranch: status.artifact carries the revision,
// message and author; an unchanged revision is not fetched again; a new
// commit is; ignore rules change the artifact digest.
func TestArtifactFollowsTheBranch(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "r")
	h1 := repo.Commit(t, "first commit\n\nbody", map[string]string{"a.yaml": "a: 1\n", "docs/x.md": "x"})
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: srv.ServeDaemon(t) + "r.git"}}
	g.Expect(env.Client.Create(t.Context(), gr)).To(Succeed())
	g.Expect(gr.Spec.Ref).To(Equal(&gitopsv1alpha1.GitRepositoryRef{Branch: "main"}), "defaulted")

	var a1 *gitopsv1alpha1.Artifact
	testenv.Eventually(g, func(g Gomega) {
		got := get(g, t, gr)
		c := meta.FindStatusCondition(got.Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(gitopsv1alpha1.SucceededReason))
		a1 = got.Status.Artifact
		g.Expect(a1.Revision).To(Equal("main@sha1:" + h1))
	}).Should(Succeed())
	g.Expect(a1.Message).To(Equal("first commit\n\nbody"))
	g.Expect(a1.Author).To(Equal("Test Author <author@example.com>"))
	g.Expect(a1.CommitTime).NotTo(BeNil())

	// Same revision: handled, not fetched again.
	v := request(t, gr)
	testenv.Eventually(g, func(g Gomega) {
		got := get(g, t, gr)
		g.Expect(got.Status.LastHandledReconcileAt).To(Equal(v))
		g.Expect(got.Status.Artifact.LastUpdateTime).To(Equal(a1.LastUpdateTime))
	}).Should(Succeed())

	// Ignore rules: same commit, new digest.
	p := []byte(`{"spec":{"ignore":"docs/\n"}}`)
	g.Expect(env.Client.Patch(t.Context(), gr, client.RawPatch("application/merge-patch+json", p))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		got := get(g, t, gr)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Status.Artifact.Revision).To(Equal(a1.Revision))
		g.Expect(got.Status.Artifact.Digest).NotTo(Equal(a1.Digest))
	}).Should(Succeed())

	h2 := repo.Commit(t, "second", map[string]string{"a.yaml": "a: 2\n"})
	request(t, gr)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(get(g, t, gr).Status.Artifact.Revision).To(Equal("main@sha1:" + h2))
	}).Should(Succeed())
}

// TestRefsAndFailures: tags and semver ranges resolve; a missing branch is
// RefNotFound; the webhook rejects bad specs with clear messages.
func TestRefsAndFailures(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "r")
	repo.Commit(t, "one", map[string]string{"a": "1"})
	repo.Tag(t, "v1.0.0")
	h := repo.Commit(t, "two", map[string]string{"a": "2"})
	repo.Tag(t, "v1.2.0")
	mk := func(name string, ref gitopsv1alpha1.GitRepositoryRef) *gitopsv1alpha1.GitRepository {
		gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gitopsv1alpha1.GitRepositorySpec{URL: repo.FileURL(), Ref: &ref}}
		g.Expect(env.Client.Create(t.Context(), gr)).To(Succeed())
		return gr
	}
	semver := mk("semver", gitopsv1alpha1.GitRepositoryRef{SemVer: "^1.0.0"})
	missing := mk("missing", gitopsv1alpha1.GitRepositoryRef{Branch: "nope"})
	testenv.Eventually(g, func(g Gomega) {
		a := get(g, t, semver).Status.Artifact
		g.Expect(a).NotTo(BeNil())
		g.Expect(a.Revision).To(Equal("v1.2.0@sha1:" + h))
	}).Should(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		c := meta.FindStatusCondition(get(g, t, missing).Status.Conditions, gitopsv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(gitopsv1alpha1.RefNotFoundReason))
		g.Expect(c.Message).To(ContainSubstring(`branch "nope"`))
	}).Should(Succeed())

	for _, tc := range []struct {
		spec gitopsv1alpha1.GitRepositorySpec
		want string
	}{
		{gitopsv1alpha1.GitRepositorySpec{URL: "https://example.com/r", Ref: &gitopsv1alpha1.GitRepositoryRef{Branch: "main", Tag: "v1"}}, "set only one of branch, tag and semver"},
		{gitopsv1alpha1.GitRepositorySpec{URL: "https://example.com/r", Interval: &metav1.Duration{Duration: -time.Minute}}, "spec.interval"},
		{gitopsv1alpha1.GitRepositorySpec{URL: "ftp://example.com/r"}, "spec.url"},
	} {
		err := env.Client.Create(t.Context(), &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bad-"}, Spec: tc.spec})
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
	}
}

// TestFetchTimeoutIsGitOperationFailed: a git server that accepts the
// connection and then says nothing makes the fetch time out after
// spec.timeout, and a closed port fails at once; both are Ready=False
// GitOperationFailed (retried, not stalled) with a message naming the
// cause, and keep no artifact.
func TestFetchTimeoutIsGitOperationFailed(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)

	// Accepts and stalls: holds every connection open until the test ends.
	stall, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := stall.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = stall.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	// Closed: a port that was free a moment ago.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	closedAddr := closed.Addr().String()
	g.Expect(closed.Close()).To(Succeed())

	mk := func(name, url string) *gitopsv1alpha1.GitRepository {
		gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gitopsv1alpha1.GitRepositorySpec{URL: url, Timeout: &metav1.Duration{Duration: 2 * time.Second}}}
		g.Expect(env.Client.Create(t.Context(), gr)).To(Succeed())
		return gr
	}
	stalled := mk("stalled", "git://"+stall.Addr().String()+"/r.git")
	refused := mk("refused", "git://"+closedAddr+"/r.git")
	for _, tc := range []struct {
		gr   *gitopsv1alpha1.GitRepository
		want string // a regexp over the message
	}{
		{stalled, `deadline exceeded|timeout|timed out`},
		{refused, `connection refused`},
	} {
		var c *metav1.Condition
		testenv.Eventually(g, func(g Gomega) {
			got := get(g, t, tc.gr)
			c = meta.FindStatusCondition(got.Status.Conditions, gitopsv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(gitopsv1alpha1.GitOperationFailedReason), c.Message)
			g.Expect(c.Message).To(MatchRegexp(tc.want))
			g.Expect(got.Status.Artifact).To(BeNil())
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, gitopsv1alpha1.StalledCondition)).To(BeNil(), "a network failure is retried")
		}).Should(Succeed())
		t.Logf("%s: Ready: %s: %s", tc.gr.Name, c.Reason, c.Message)
	}
	mu.Lock()
	g.Expect(held).NotTo(BeEmpty(), "the controller connected to the stalling server")
	mu.Unlock()
}
