package sync_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/internal/gitops/receiver"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestReceiverTriggersFetch: a GitHub-style push webhook, signed with the
// GitRepository's token, makes the new commit applied at once (the
// GitRepository's interval is an hour); a bad signature is refused.
func TestReceiverTriggersFetch(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	repo, h1, gr := setupRepo(t, ns, map[string]string{"app/a.yaml": configMap("a", map[string]string{"v": "1"})})
	g.Expect(env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"},
		StringData: map[string]string{"token": "hook-token"}})).To(Succeed())
	p := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"hook"}}}`, receiver.SecretAnnotation)
	g.Expect(env.Client.Patch(t.Context(), gr, rawMerge(p))).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "app", "app", "app", true))).To(Succeed())
	waitApplied(t, g, ns, "app", h1)

	h2 := repo.Commit(t, "pushed", map[string]string{"app/a.yaml": configMap("a", map[string]string{"v": "2"})})
	url := fmt.Sprintf("%s/hook/gitrepository/%s/app", env.ReceiverURL, ns)
	hc := &http.Client{}
	post := func(sig string) int {
		body := []byte(`{"ref":"refs/heads/main"}`)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		if sig == "" {
			sig = receiver.Sign(body, []byte("hook-token"))
		}
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", sig)
		resp, err := hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	g.Expect(post("sha256=00")).To(Equal(http.StatusUnauthorized))
	g.Expect(post("")).To(Equal(http.StatusAccepted))
	waitApplied(t, g, ns, "app", h2)
	expectCM(t, g, ns, "a", map[string]string{"v": "2"})
}
