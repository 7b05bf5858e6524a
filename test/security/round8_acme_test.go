package security

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/acme/pebbletest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// startPebble runs Pebble with its directory on the suite's pebbleDirPort
// (which the suite's manager allows), validating HTTP-01 on httpPort. Outside
// CI a missing Pebble skips the test.
func startPebble(t *testing.T, httpPort int) *pebbletest.Pebble {
	t.Helper()
	if err := pebbletest.Available(); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("*** SKIPPING ACME test: %v ***", err)
		}
		t.Fatal(err)
	}
	p, err := pebbletest.StartOn(t.Context(), httpPort, pebbleDirPort)
	if err != nil {
		t.Fatalf("pebble: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// askIssuer creates, as tn, a CertificateRequest of tn's Issuer issuer for
// spec's names (labelled for shard when not empty), and waits for its
// outcome (Ready no longer Pending).
func askIssuer(t *testing.T, g Gomega, tn *tenant, issuer, shard, name string, spec pkiv1alpha1.CertificateSpec) *pkiv1alpha1.CertificateRequest {
	t.Helper()
	return askFor(t, g, tn, pkiv1alpha1.IssuerReference{Kind: "Issuer", Name: issuer}, shard, name, spec, 90*time.Second)
}

// TestNamespacedACMEOrdersOnlyAllowedNames: every ACME order's HTTP-01
// challenge is answered by the manager's one shared port, whatever the
// namespace of the Issuer that ordered. Before, tenant A's namespaced ACME
// Issuer at an allowed directory obtained from the CA (Pebble here, which
// validates against that port) a certificate for tenant B's names:
// shop.<B>.apps.example.test (B's under the admin's rule), B's Service name
// web.<B>.svc.cluster.local, an IP address. Now a namespaced ACME Issuer
// orders only names matching --acme-namespaced-dns-names (here
// "*.{namespace}.apps.example.test"): A's requests for B's names are
// Denied/Stalled IssuerPolicyDenied naming the name and the rule, Pebble
// got no order for them, and nothing is written in B's namespace; A's own
// name is issued. With the chart's default (no patterns, the suite's
// manager), a namespaced ACME Issuer orders nothing, not even its own
// namespace's names.
func TestNamespacedACMEOrdersOnlyAllowedNames(t *testing.T) {
	attacker, victim := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	httpPort, err := testenv.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	p := startPebble(t, httpPort)
	const shard, rule = "acme-names", "*.{namespace}.apps.example.test"
	stop := env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"issuer", "certificaterequest"}
		o.ShardKey = shard
		o.PKI.ACMEAllowedDirectories = []string{p.Directory}
		o.PKI.ACMEHTTP01BindAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
		o.PKI.ACMENamespacedDNSNames = []string{rule}
	})
	t.Cleanup(func() { _ = stop() })

	iss := acmeIssuer(attacker.NS, "pebble", p.Directory)
	iss.Spec.ACME.CABundle = p.CABundle
	iss.Labels = map[string]string{setup.ShardLabel: shard}
	g.Expect(attacker.Client.Create(ctx, iss)).To(Succeed())
	waitIssuerReason(t, g, attacker.Client, iss, pkiv1alpha1.IssuerReadyReason)
	orders := func() int {
		n, err := p.Orders()
		g.Expect(err).NotTo(HaveOccurred())
		return n
	}
	g.Expect(orders()).To(BeZero())

	victims := victim.NS + ".apps.example.test"
	for _, c := range []struct {
		name  string
		spec  pkiv1alpha1.CertificateSpec
		words []string
	}{
		{"b-app", pkiv1alpha1.CertificateSpec{DNSNames: []string{"shop." + victims}}, []string{`"shop.` + victims + `"`, "--acme-namespaced-dns-names", rule, attacker.NS}},
		{"b-service", pkiv1alpha1.CertificateSpec{DNSNames: []string{"web." + victim.NS + ".svc.cluster.local"}}, []string{`"web.` + victim.NS + `.svc.cluster.local"`, rule}},
		{"b-common-name", pkiv1alpha1.CertificateSpec{CommonName: "shop." + victims}, []string{`"shop.` + victims + `"`, rule}},
		{"own-and-b", pkiv1alpha1.CertificateSpec{DNSNames: []string{"shop." + attacker.NS + ".apps.example.test", "shop." + victims}}, []string{`"shop.` + victims + `"`}},
		{"ip", pkiv1alpha1.CertificateSpec{DNSNames: []string{"shop." + attacker.NS + ".apps.example.test"}, IPAddresses: []string{"127.0.0.1"}}, []string{`"127.0.0.1"`, "IP address"}},
	} {
		cr := askIssuer(t, g, attacker, "pebble", shard, c.name, c.spec)
		expectDenied(g, cr, c.words...)
	}
	g.Consistently(func(g Gomega) {
		n, err := p.Orders()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeZero(), "an order reached the CA for a refused request")
	}).WithTimeout(2 * time.Second).Should(Succeed())

	// A's own name under the rule is ordered and issued.
	own := "shop." + attacker.NS + ".apps.example.test"
	cr := askIssuer(t, g, attacker, "pebble", shard, "own", pkiv1alpha1.CertificateSpec{DNSNames: []string{own}})
	testenv.HasCondition(g, cr.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.IssuedReason)
	blk, _ := pem.Decode(cr.Status.Certificate)
	g.Expect(blk).NotTo(BeNil())
	leaf, err := x509.ParseCertificate(blk.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(leaf.DNSNames).To(ConsistOf(own))
	g.Expect(orders()).To(Equal(1), "control: the allowed request did reach the CA")

	// The chart's default (the suite's manager): no patterns, so a
	// namespaced ACME Issuer orders no name at all.
	def := acmeIssuer(attacker.NS, "pebble-default", p.Directory)
	def.Spec.ACME.CABundle = p.CABundle
	g.Expect(attacker.Client.Create(ctx, def)).To(Succeed())
	waitIssuerReason(t, g, attacker.Client, def, pkiv1alpha1.IssuerReadyReason)
	cr = askIssuer(t, g, attacker, "pebble-default", "", "own-default", pkiv1alpha1.CertificateSpec{DNSNames: []string{own}})
	expectDenied(g, cr, `"`+own+`"`, "--acme-namespaced-dns-names is empty")
	g.Expect(orders()).To(Equal(1), "the refused request placed no order")

	// The victim is untouched: nothing was written in its namespace.
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(env.Client.List(ctx, &crs, client.InNamespace(victim.NS))).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty())
	var secrets corev1.SecretList
	g.Expect(env.Client.List(ctx, &secrets, client.InNamespace(victim.NS))).To(Succeed())
	g.Expect(secrets.Items).To(BeEmpty())
}
