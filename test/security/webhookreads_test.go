package security

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

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
