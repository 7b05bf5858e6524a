package receiver_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/receiver"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// A control plane with no controllers: the tests run their own receiver.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{NoManager: true}, &env))
}

// apiLog records every request a REST config sends to the API server.
type apiLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *apiLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.calls = append(l.calls, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// mark returns the number of requests so far, for since.
func (l *apiLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// since returns the requests sent after mark.
func (l *apiLog) since(mark int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls[mark:]...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// startReceiver runs a manager with only the receiver, set up by
// receiver.Setup as setup.New does, on a REST config whose every request is
// logged. It returns the receiver's base URL and the log.
func startReceiver(t *testing.T, o receiver.Options) (string, *apiLog) {
	t.Helper()
	log := &apiLog{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(log.wrap)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: setup.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatalf("creating a manager: %v", err)
	}
	o.BindAddress = "127.0.0.1:0"
	srv, err := receiver.Setup(t.Context(), mgr, o)
	if err != nil {
		t.Fatalf("setting up the receiver: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for srv.StartedChecker()(nil) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the receiver did not start listening")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "http://" + srv.Addr().String(), log
}

// hookRepo creates a GitRepository with the webhook annotation and its token
// Secret in a new namespace. Nothing fetches: the suite runs no controllers.
func hookRepo(t *testing.T, token string) *gitopsv1alpha1.GitRepository {
	t.Helper()
	ns := env.NewNamespace(t)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"},
		StringData: map[string]string{"token": token}}
	repo := &gitopsv1alpha1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app",
			Annotations: map[string]string{receiver.SecretAnnotation: "hook"}},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: "http://127.0.0.1:1/none.git",
			Interval: &metav1.Duration{Duration: time.Hour}},
	}
	if err := env.Client.Create(t.Context(), sec); err != nil {
		t.Fatalf("creating the token Secret: %v", err)
	}
	if err := env.Client.Create(t.Context(), repo); err != nil {
		t.Fatalf("creating the GitRepository: %v", err)
	}
	return repo
}

// post sends body with the given headers (pairs) and returns the status and
// Retry-After.
func post(t *testing.T, url string, body []byte, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// readsOf keeps the requests that read GitRepositories or Secrets.
func readsOf(calls []string) []string {
	var out []string
	for _, c := range calls {
		if strings.HasPrefix(c, "GET ") && (strings.Contains(c, "/secrets") || strings.Contains(c, "/gitrepositories")) {
			out = append(out, c)
		}
	}
	return out
}
