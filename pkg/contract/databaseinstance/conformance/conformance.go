// Package conformance is the database instance contract's conformance test:
// a Go test helper that any instance kind (built in or third party) runs
// against a real API server and a real database server, to show that the
// generic Database controller can use it. Run it from a test:
//
//	conformance.Run(t, conformance.Harness{
//		Client: c, Namespace: ns,
//		GVK:       schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "CockroachInstance"},
//		NewReady:  func(t *testing.T, name string) { /* create the instance and its admin Secret */ },
//		NewBroken: func(t *testing.T, name string) { /* same, with a wrong password */ },
//	})
//
// It checks what docs/contracts/database-instance.md promises: a ready
// instance publishes every contract field at the current generation, the
// published admin Secret logs in to the published endpoint (a real login and
// SELECT 1, whose version matches status.version's engine), the Ready
// condition agrees with status.ready, and an instance whose server refuses
// the credentials never reports ready and says why in a condition.
package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/pkg/contract/databaseinstance"
)

// Harness describes the kind under test.
type Harness struct {
	// Client reaches the API server (uncached).
	Client client.Client
	// Namespace holds the instances the test creates.
	Namespace string
	// GVK is the instance kind.
	GVK schema.GroupVersionKind
	// NewReady creates, in Namespace, an instance named name (and its admin
	// Secret) for a running server with correct credentials.
	NewReady func(t *testing.T, name string)
	// NewBroken creates an instance named name whose server refuses its
	// admin credentials.
	NewBroken func(t *testing.T, name string)
	// BrokenReason is the Ready condition's reason the kind reports when the
	// server refuses the credentials (the built-in kinds say
	// AuthenticationFailed). Empty accepts any non-empty reason: set it, so
	// that the test fails when the instance is not ready for another cause.
	BrokenReason string
	// Timeout bounds each wait; 60 s when zero.
	Timeout time.Duration
}

func (h Harness) get(t *testing.T, g gomega.Gomega, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(h.GVK)
	g.Expect(h.Client.Get(t.Context(), types.NamespacedName{Namespace: h.Namespace, Name: name}, u)).To(gomega.Succeed())
	return u
}

func (h Harness) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return 60 * time.Second
}

func readyCondition(u *unstructured.Unstructured) (status, reason, message string, found bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		s, _ := m["status"].(string)
		r, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		return s, r, msg, true
	}
	return "", "", "", false
}

// Run runs the conformance tests as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	t.Run("ReadyInstancePublishesTheContract", func(t *testing.T) {
		g := gomega.NewWithT(t)
		h.NewReady(t, "conformance-ready")
		var st databaseinstance.Status
		var u *unstructured.Unstructured
		g.Eventually(func(g gomega.Gomega) {
			u = h.get(t, g, "conformance-ready")
			var err error
			st, err = databaseinstance.Read(u)
			g.Expect(err).NotTo(gomega.HaveOccurred(), "status honours the contract")
			g.Expect(st.Ready).To(gomega.BeTrue(), "status.ready is true at the current generation")
		}).WithTimeout(h.timeout()).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())

		og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		g.Expect(og).To(gomega.Equal(u.GetGeneration()), "status.observedGeneration")
		status, _, _, found := readyCondition(u)
		g.Expect(found).To(gomega.BeTrue(), "a Ready condition exists")
		g.Expect(status).To(gomega.Equal(string(metav1.ConditionTrue)), "the Ready condition agrees with status.ready")

		// The published Secret logs in to the published endpoint.
		sec := &corev1.Secret{}
		g.Expect(h.Client.Get(t.Context(), types.NamespacedName{Namespace: h.Namespace, Name: st.AdminSecretName}, sec)).To(gomega.Succeed())
		user, pw := string(sec.Data[databaseinstance.UsernameKey]), string(sec.Data[databaseinstance.PasswordKey])
		g.Expect(user).NotTo(gomega.BeEmpty(), "the admin Secret has the key %q", databaseinstance.UsernameKey)
		g.Expect(pw).NotTo(gomega.BeEmpty(), "the admin Secret has the key %q", databaseinstance.PasswordKey)
		cfg := sqlengine.Config{Engine: sqlengine.Engine(st.Engine), Host: st.Host, Port: st.Port, User: user, Password: pw}
		if mode, _, _ := unstructured.NestedString(u.Object, "spec", "tls", "mode"); mode != "" {
			cfg.TLSMode = sqlengine.TLSMode(mode)
		}
		version, err := sqlengine.Ping(t.Context(), cfg)
		g.Expect(err).NotTo(gomega.HaveOccurred(), "logging in with the published admin Secret at the published endpoint")
		g.Expect(version).To(gomega.Equal(st.Version), "status.version is what the server reports")
		if st.Engine == "mariadb" {
			g.Expect(strings.ToLower(version)).To(gomega.ContainSubstring("mariadb"), "a mariadb engine reports a MariaDB version")
		}
	})

	t.Run("RefusedCredentialsNeverReady", func(t *testing.T) {
		g := gomega.NewWithT(t)
		h.NewBroken(t, "conformance-broken")
		g.Eventually(func(g gomega.Gomega) {
			u := h.get(t, g, "conformance-broken")
			status, reason, msg, found := readyCondition(u)
			g.Expect(found).To(gomega.BeTrue(), "a Ready condition exists")
			g.Expect(status).To(gomega.Equal(string(metav1.ConditionFalse)))
			g.Expect(reason).NotTo(gomega.BeEmpty())
			if h.BrokenReason != "" {
				g.Expect(reason).To(gomega.Equal(h.BrokenReason), "refused credentials are reported as such: %s", msg)
			}
			g.Expect(msg).NotTo(gomega.BeEmpty(), "the condition says why")
		}).WithTimeout(h.timeout()).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())
		g.Consistently(func(g gomega.Gomega) {
			st, err := databaseinstance.Read(h.get(t, g, "conformance-broken"))
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(st.Ready).To(gomega.BeFalse(), "an instance whose server refuses the credentials is never ready")
		}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
	})
}
