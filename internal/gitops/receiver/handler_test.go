package receiver_test

import (
	"bytes"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/receiver"
	"github.com/converge-dev/converge/internal/testenv"
)

// unlimited lets every request through the rate limits.
var unlimited = receiver.Options{Rate: 1e6, Burst: 1e6, SourceRate: 1e6, SourceBurst: 1e6}

// TestUnverifiedRequestsCauseNoAPIRequest sends requests that must be
// refused — unsigned, badly signed, for unknown or unannotated
// GitRepositories, too large — and checks from the receiver's own API client
// that none of them sent any request to the API server (the lookups are
// answered by the cache), and that the GitRepository was not touched. Then
// verified requests each cause exactly one request: the patch.
func TestUnverifiedRequestsCauseNoAPIRequest(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	repo := hookRepo(t, "s3cret")
	// Created before the receiver starts, so that its cache lists it.
	unannotated := &gitopsv1alpha1.GitRepository{}
	unannotated.Namespace, unannotated.Name = repo.Namespace, "plain"
	unannotated.Spec = repo.Spec
	g.Expect(env.Client.Create(t.Context(), unannotated)).To(Succeed())
	base, log := startReceiver(t, unlimited)
	url := base + receiver.PathPrefix + "gitrepository/" + repo.Namespace + "/" + repo.Name
	body := []byte(`{"ref":"refs/heads/main"}`)

	// The cache has caught up with the Secret and the annotation once a
	// verified ping (which patches nothing) answers 200.
	testenv.Eventually(g, func() int {
		code, _ := post(t, url, body, "X-GitHub-Event", "ping", "X-Hub-Signature-256", receiver.Sign(body, []byte("s3cret")))
		return code
	}).Should(Equal(http.StatusOK))

	good := receiver.Sign(body, []byte("s3cret"))
	refused := []struct {
		name string
		url  string
		body []byte
		hdr  []string
		want int
	}{
		{"unsigned", url, body, nil, http.StatusUnauthorized},
		{"signed with another token", url, body, []string{"X-Hub-Signature-256", receiver.Sign(body, []byte("guess"))}, http.StatusUnauthorized},
		{"signature of another body", url, []byte(`{"ref":"x"}`), []string{"X-Hub-Signature-256", good}, http.StatusUnauthorized},
		{"wrong GitLab token", url, body, []string{"X-Gitlab-Token", "guess"}, http.StatusUnauthorized},
		{"wrong bearer token", url, body, []string{"Authorization", "Bearer guess"}, http.StatusUnauthorized},
		{"unknown GitRepository", base + "/hook/gitrepository/" + repo.Namespace + "/nope", body, []string{"X-Hub-Signature-256", good}, http.StatusNotFound},
		{"unknown namespace", base + "/hook/gitrepository/kube-system/app", body, []string{"X-Hub-Signature-256", good}, http.StatusNotFound},
		{"GitRepository without the annotation", base + "/hook/gitrepository/" + repo.Namespace + "/plain", body, []string{"X-Hub-Signature-256", good}, http.StatusNotFound},
		{"bad path", base + "/hook/secret/" + repo.Namespace + "/hook", body, []string{"X-Hub-Signature-256", good}, http.StatusNotFound},
		{"path with an extra segment", url + "/x", body, []string{"X-Hub-Signature-256", good}, http.StatusNotFound},
		{"path without a name", base + "/hook/gitrepository/" + repo.Namespace + "/", body, []string{"X-Hub-Signature-256", good}, http.StatusNotFound},
		{"path without a namespace", base + "/hook/gitrepository//" + repo.Name, body, []string{"X-Hub-Signature-256", good}, http.StatusNotFound},
		{"unsigned, for an unknown GitRepository", base + "/hook/gitrepository/" + repo.Namespace + "/nope", body, nil, http.StatusUnauthorized},
		{"too large", url, bytes.Repeat([]byte("a"), 1<<20+1), []string{"X-Hub-Signature-256", good}, http.StatusRequestEntityTooLarge},
	}
	mark := log.mark()
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, _ := post(t, tc.url, tc.body, tc.hdr...)
			NewWithT(t).Expect(code).To(Equal(tc.want))
		})
	}
	t.Run("GET", func(t *testing.T) {
		resp, err := http.Get(url) //nolint:noctx // a plain GET is the point
		g := NewWithT(t)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusMethodNotAllowed))
	})
	g.Expect(log.since(mark)).To(BeEmpty(), "refused requests sent requests to the API server")
	got := &gitopsv1alpha1.GitRepository{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(repo), got)).To(Succeed())
	g.Expect(got.Annotations).NotTo(HaveKey(gitopsv1alpha1.ReconcileRequestAnnotation))

	for _, hdr := range [][]string{
		{"X-GitHub-Event", "push", "X-Hub-Signature-256", good},
		{"X-Gitlab-Token", "s3cret"},
		{"Authorization", "Bearer s3cret"},
		{"X-Signature-256", good},
	} {
		t.Run("verified "+hdr[0], func(t *testing.T) {
			g := NewWithT(t)
			mark := log.mark()
			code, _ := post(t, url, body, hdr...)
			g.Expect(code).To(Equal(http.StatusAccepted))
			calls := log.since(mark)
			g.Expect(calls).To(HaveLen(1), "one request: the patch")
			g.Expect(calls[0]).To(HavePrefix("PATCH "))
			g.Expect(calls[0]).To(ContainSubstring("/gitrepositories/" + repo.Name))
			g.Expect(readsOf(calls)).To(BeEmpty())
		})
	}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(repo), got)).To(Succeed())
	g.Expect(got.Annotations).To(HaveKey(gitopsv1alpha1.ReconcileRequestAnnotation))
	g.Expect(got.ManagedFields).To(ContainElement(HaveField("Manager", receiver.FieldManager)))
}

// TestTokenRotation: a new token in the Secret is used as soon as the cache
// has it, and the old one is refused.
func TestTokenRotation(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	repo := hookRepo(t, "old")
	base, _ := startReceiver(t, unlimited)
	url := base + receiver.PathPrefix + "gitrepository/" + repo.Namespace + "/" + repo.Name
	body := []byte(`{}`)
	send := func(tok string) int {
		code, _ := post(t, url, body, "X-Hub-Signature-256", receiver.Sign(body, []byte(tok)))
		return code
	}
	testenv.Eventually(g, func() int { return send("old") }).Should(Equal(http.StatusAccepted))
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: repo.Namespace, Name: "hook"}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"stringData":{"token":"new"}}`))
	g.Expect(env.Client.Patch(t.Context(), sec, patch)).To(Succeed())
	testenv.Eventually(g, func() int { return send("new") }).Should(Equal(http.StatusAccepted))
	g.Expect(send("old")).To(Equal(http.StatusUnauthorized))
}
