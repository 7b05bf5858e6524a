package security

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/receiver"
	"github.com/converge-dev/converge/internal/testenv"
)

// apiReads sums kube-apiserver's apiserver_request_total for GET and LIST on
// Secrets and GitRepositories: every read of the kinds the receiver needs,
// by anyone. (Reading /metrics is not such a read.)
func apiReads(t *testing.T) float64 {
	t.Helper()
	return apiRequests(t, []string{"secrets", "gitrepositories"}, "GET", "LIST")
}

// quietReads waits for a moment in which nothing else reads Secrets or
// GitRepositories (the manager's controllers settle after the setup), and
// returns the count then.
func quietReads(t *testing.T) float64 {
	t.Helper()
	prev := apiReads(t)
	for range 40 {
		time.Sleep(250 * time.Millisecond)
		cur := apiReads(t)
		if cur == prev {
			return cur
		}
		prev = cur
	}
	t.Fatal("Secrets or GitRepositories are read all the time; cannot attribute reads to the receiver")
	return 0
}

// TestReceiverRefusesUnverifiedPushes is a network peer attacking the push
// receiver of a tenant's GitRepository: unsigned and badly signed requests,
// guesses at other namespaces, and a flood. The API server counts no read of
// a Secret or a GitRepository while they are answered, the flood is answered
// 429 with Retry-After, and the GitRepository is not asked to fetch. A
// correctly signed push afterwards still makes it fetch.
func TestReceiverRefusesUnverifiedPushes(t *testing.T) {
	testenv.Need(t, env)
	if env.ReceiverURL == "" {
		t.Fatal("the suite's manager runs no receiver")
	}
	g := NewWithT(t)
	tn := newTenant(t)
	ctx := t.Context()
	g.Expect(tn.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "hook"},
		StringData: map[string]string{"token": "tenant-token"}})).To(Succeed())
	repo := &gitopsv1alpha1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "app", Annotations: map[string]string{receiver.SecretAnnotation: "hook"}},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: "http://127.0.0.1:1/none.git",
			Interval: &metav1.Duration{Duration: time.Hour}},
	}
	g.Expect(tn.Client.Create(ctx, repo)).To(Succeed())
	url := fmt.Sprintf("%s/hook/gitrepository/%s/%s", env.ReceiverURL, tn.NS, repo.Name)
	body := []byte(`{"ref":"refs/heads/main"}`)
	send := func(target string, hdr ...string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}

	// Let the GitRepository controller fail its first fetch and settle.
	testenv.Eventually(g, func(g Gomega) {
		got := &gitopsv1alpha1.GitRepository{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(repo), got)).To(Succeed())
		g.Expect(got.Status.Conditions).NotTo(BeEmpty())
	}).Should(Succeed())
	before := quietReads(t)

	attacks := [][]string{
		{url},
		{url, "X-Hub-Signature-256", receiver.Sign(body, []byte("guess"))},
		{url, "X-Gitlab-Token", "guess"},
		{url, "Authorization", "Bearer guess"},
		{env.ReceiverURL + "/hook/gitrepository/kube-system/app", "X-Hub-Signature-256", receiver.Sign(body, []byte("guess"))},
		{env.ReceiverURL + "/hook/gitrepository/" + tn.NS + "/other", "X-Gitlab-Token", "guess"},
	}
	var codes []int
	var limited int
	for i := range 60 {
		a := attacks[i%len(attacks)]
		code, retry := send(a[0], a[1:]...)
		codes = append(codes, code)
		if code == http.StatusTooManyRequests {
			limited++
			g.Expect(strconv.Atoi(retry)).To(BeNumerically(">=", 1), "Retry-After")
		}
	}
	g.Expect(codes).To(HaveEach(BeElementOf(http.StatusUnauthorized, http.StatusNotFound, http.StatusTooManyRequests)))
	g.Expect(codes[:5]).To(HaveEach(BeElementOf(http.StatusUnauthorized, http.StatusNotFound)), "the first requests reach verification")
	g.Expect(limited).To(BeNumerically(">=", 40), "the flood is rate-limited")
	g.Expect(apiReads(t)).To(Equal(before), "unverified pushes caused reads of Secrets or GitRepositories")

	got := &gitopsv1alpha1.GitRepository{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(repo), got)).To(Succeed())
	g.Expect(got.Annotations).NotTo(HaveKey(gitopsv1alpha1.ReconcileRequestAnnotation), "nothing changed")

	// The flood spent this source's budget: a verified push waits for it,
	// as Retry-After says, and then makes the GitRepository fetch.
	var code int
	for range 30 {
		var retry string
		code, retry = send(url, "X-GitHub-Event", "push", "X-Hub-Signature-256", receiver.Sign(body, []byte("tenant-token")))
		if code != http.StatusTooManyRequests {
			break
		}
		secs, _ := strconv.Atoi(retry)
		time.Sleep(time.Duration(max(secs, 1)) * time.Second)
	}
	g.Expect(code).To(Equal(http.StatusAccepted))
	testenv.Eventually(g, func(g Gomega) {
		got := &gitopsv1alpha1.GitRepository{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(repo), got)).To(Succeed())
		req := got.Annotations[gitopsv1alpha1.ReconcileRequestAnnotation]
		g.Expect(req).NotTo(BeEmpty())
		g.Expect(got.Status.LastHandledReconcileAt).To(Equal(req), "the GitRepository controller handled the request")
	}).Should(Succeed())
}
