package certificate_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/acme"
	"github.com/converge-dev/converge/internal/acme/pebbletest"
	"github.com/converge-dev/converge/internal/controller/certificaterequest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestACMEAnsweredByAStandby: with several replicas, the CA's validation
// may reach one that did not order. Here a second Pebble validates HTTP-01
// only against a "standby": a Solver of its own, with nothing in memory,
// reading the ConfigMaps the suite's manager (the leader, started with
// ACMEHTTP01Namespace) publishes. The Certificate is issued, the standby
// answered, and the challenge ConfigMaps are gone afterwards.
func TestACMEAnsweredByAStandby(t *testing.T) {
	testenv.Need(t, env)
	needPebble(t)
	g := NewWithT(t)
	port, err := testenv.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	standby := acme.NewSolver()
	standby.Shared = certificaterequest.ConfigMapShared{Client: env.Client, Reader: env.Client, Namespace: http01Namespace}
	go func() {
		_ = (&acme.Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Solver: standby}).Start(t.Context())
	}()
	p2, err := pebbletest.StartOn(t.Context(), port, standbyDirPort)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(p2.Stop)

	ns := env.NewNamespace(t)
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pebble-standby"}, Spec: pkiv1alpha1.IssuerSpec{ACME: &pkiv1alpha1.ACMEIssuer{
		Server: p2.Directory, Email: "admin@example.com", CABundle: p2.CABundle,
		PrivateKeySecretRef: pkiv1alpha1.SecretKeySelector{Name: "pebble-standby-account"},
		Solvers:             []pkiv1alpha1.ACMESolver{{HTTP01: &pkiv1alpha1.ACMEHTTP01Solver{}}}}}}
	g.Expect(env.Client.Create(t.Context(), iss)).To(Succeed())
	c := newCert(ns, "ha", "pebble-standby", "ha.example.test")
	g.Expect(env.Client.Create(t.Context(), c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue(), "%v", c.Status.Conditions)
	}).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(standby.Served()).To(BeNumerically(">", 0), "the standby answered no challenge")
	root, err := p2.Roots(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	verifyServing(t, g, getSecret(t, ns, "ha-tls"), root, "ha.example.test")
	g.Eventually(func(g Gomega) {
		var cms corev1.ConfigMapList
		g.Expect(env.Client.List(t.Context(), &cms, client.InNamespace(http01Namespace),
			client.MatchingLabels{certificaterequest.HTTP01ChallengeLabel: "true"})).To(Succeed())
		g.Expect(cms.Items).To(BeEmpty(), "challenge ConfigMaps left behind")
	}).WithTimeout(10 * time.Second).Should(Succeed())
}
