package security

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// apiLists is kube-apiserver's apiserver_request_total for LIST on resource
// (every client's: the manager's too).
func apiLists(t *testing.T, resource string) float64 {
	t.Helper()
	raw, err := env.Clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `resource="`+resource+`"`) || !strings.Contains(l, `verb="LIST"`) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", l, err)
		}
		sum += v
	}
	return sum
}

// postReviews posts n AdmissionReviews asking to create obj (of kind gvk,
// resource) straight to the manager's webhook server at path, as anyone who
// reaches the webhook port can, and returns how many were allowed.
func postReviews(t *testing.T, path string, gvk metav1.GroupVersionKind, resource string, obj runtime.Object, n int) int {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	// The webhook server's certificate is the test's own self-signed one.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	allowed := 0
	for i := range n {
		review := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: types.UID(fmt.Sprintf("review-%d", i)), Kind: gvk, Operation: admissionv1.Create,
				Resource: metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource},
				Object:   runtime.RawExtension{Raw: raw},
			},
		}
		body, _ := json.Marshal(review)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fmt.Sprintf("https://127.0.0.1:%d%s", env.WebhookPort, path), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("posting an AdmissionReview to %s: %v", path, err)
		}
		var out admissionv1.AdmissionReview
		err = json.NewDecoder(resp.Body).Decode(&out)
		_ = resp.Body.Close()
		if err != nil || out.Response == nil {
			t.Fatalf("the webhook's answer to review %d: %v", i, err)
		}
		if out.Response.Allowed {
			allowed++
		}
	}
	return allowed
}
