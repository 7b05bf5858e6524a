package security

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/acme/pebbletest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// A CA ClusterIssuer's policy checked DNS names only. Before, tenant A got
// from a CA ClusterIssuer without a policy a leaf for tenant B's Service
// ClusterIP, for 127.0.0.1 and for ::1, and from one whose policy allowed
// only its own Service names, a leaf for 127.0.0.1 beside them: every
// client trusting the cluster CA that dials the address would take A for
// what listens there. Now an IP address is signed only inside
// spec.policy.allowedIPAddresses (CIDRs); without them, for no tenant
// namespace. Refusals are Denied/Stalled IssuerPolicyDenied naming the
// address and the allowed CIDRs, an address inside them is issued, the
// webhook refuses a CIDR that does not parse naming the field, and nothing
// is written in B's namespace.
func TestClusterIssuerSignsNoIPAddressUnlessAllowed(t *testing.T) {
	attacker, victim := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()

	// B's Service, its ClusterIP allocated by the API server.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
	g.Expect(victim.Client.Create(ctx, svc)).To(Succeed())
	g.Expect(net.ParseIP(svc.Spec.ClusterIP)).NotTo(BeNil(), "the Service got a ClusterIP")
	svcRV := svc.ResourceVersion

	// No policy: no IP address for a tenant namespace.
	open := clusterCA(t, g, "cluster-ip-"+attacker.NS, nil)
	for name, ip := range map[string]string{"b-service-ip": svc.Spec.ClusterIP, "loopback": "127.0.0.1", "loopback6": "::1"} {
		cr := askClusterIssuer(t, g, attacker, open, name, pkiv1alpha1.CertificateSpec{
			DNSNames: []string{"svc-a." + attacker.NS + ".svc"}, IPAddresses: []string{ip}})
		expectDenied(g, cr, `IP address "`+ip+`"`, `ClusterIssuer "`+open.Name+`"`, "spec.policy.allowedIPAddresses", "namespace "+attacker.NS)
	}
	own := askClusterIssuer(t, g, attacker, open, "own-name", pkiv1alpha1.CertificateSpec{DNSNames: []string{"svc-a." + attacker.NS + ".svc"}})
	testenv.HasCondition(g, own.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.IssuedReason)

	// A policy allowing A's Service names and 192.0.2.0/24.
	const allowed = "192.0.2.0/24"
	narrow := clusterCA(t, g, "cluster-ip-policy-"+attacker.NS, &pkiv1alpha1.ClusterIssuerPolicy{
		AllowedDNSNames:    []string{"*.{namespace}.svc"},
		AllowedIPAddresses: []string{allowed, "2001:db8::/64"},
	})
	for name, ips := range map[string][]string{
		"outside":       {"127.0.0.1"},
		"b-ip-policy":   {svc.Spec.ClusterIP},
		"inside-and-b":  {"192.0.2.7", svc.Spec.ClusterIP},
		"v6-outside":    {"2001:db8:0:1::7"},
		"mapped-v4-out": {"::ffff:198.51.100.7"},
	} {
		cr := askClusterIssuer(t, g, attacker, narrow, name, pkiv1alpha1.CertificateSpec{
			DNSNames: []string{"svc-a." + attacker.NS + ".svc"}, IPAddresses: ips})
		// An IPv4-mapped address is named as IPv4.
		expectDenied(g, cr, `"`+net.ParseIP(ips[len(ips)-1]).String()+`"`, "spec.policy.allowedIPAddresses", `"`+allowed+`"`)
	}
	inside := askClusterIssuer(t, g, attacker, narrow, "inside", pkiv1alpha1.CertificateSpec{
		DNSNames: []string{"svc-a." + attacker.NS + ".svc"}, IPAddresses: []string{"192.0.2.7", "2001:db8::7"}})
	testenv.HasCondition(g, inside.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.IssuedReason)
	blk, _ := pem.Decode(inside.Status.Certificate)
	g.Expect(blk).NotTo(BeNil())
	leaf, err := x509.ParseCertificate(blk.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(leaf.IPAddresses).To(HaveLen(2))
	g.Expect(leaf.IPAddresses[0].Equal(net.ParseIP("192.0.2.7"))).To(BeTrue())

	// The admin's CIDRs are checked at admission, naming the field.
	bad := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "cluster-ip-bad-" + attacker.NS},
		Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}},
			Policy: &pkiv1alpha1.ClusterIssuerPolicy{AllowedIPAddresses: []string{"10.0.0.0/8", "10.0.0.0/33", "192.0.2.7"}}}}
	err = env.Client.Create(ctx, bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.policy.allowedIPAddresses[1]"))
	g.Expect(err.Error()).To(ContainSubstring("spec.policy.allowedIPAddresses[2]"))
	g.Expect(err.Error()).NotTo(ContainSubstring("spec.policy.allowedIPAddresses[0]"))

	// The victim is untouched.
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(env.Client.List(ctx, &crs, client.InNamespace(victim.NS))).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty())
	var secrets corev1.SecretList
	g.Expect(env.Client.List(ctx, &secrets, client.InNamespace(victim.NS))).To(Succeed())
	for _, s := range secrets.Items {
		g.Expect(s.Type).NotTo(Equal(corev1.SecretTypeTLS), "a TLS Secret appeared in the victim's namespace: %s", s.Name)
	}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	g.Expect(svc.ResourceVersion).To(Equal(svcRV))
}

// warnings collects the API server's warning headers.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

// HandleWarningHeaderWithContext records one warning.
func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// An ACME ClusterIssuer without spec.policy.allowedDNSNames orders any DNS
// name (other namespaces' svc/pod names aside) for every namespace it
// selects, validated through the manager's one HTTP-01 port. As in
// cert-manager, that is the admin's grant, not refused; but the admin
// creating or changing one is told, in an admission warning, what it
// grants and to whom (every namespace, or the selector's). A CA
// ClusterIssuer and an ACME one with allowedDNSNames get no warning.
func TestACMEClusterIssuerGrantIsSaid(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	var w warnings
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = &w
	admin, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	ns := env.NewNamespace(t)

	ci := func(name string, pol *pkiv1alpha1.ClusterIssuerPolicy) *pkiv1alpha1.ClusterIssuer {
		iss := acmeIssuer("", name, pebbletest.DirectoryURL(pebbleDirPort))
		c := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: iss.Spec, Policy: pol}}
		g.Expect(admin.Create(ctx, c)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), c) })
		return c
	}
	said := func(words ...string) {
		t.Helper()
		msgs := w.take()
		g.Expect(msgs).To(HaveLen(1), "one warning")
		for _, word := range words {
			g.Expect(msgs[0]).To(ContainSubstring(word))
		}
	}

	all := ci("acme-all-"+ns, nil)
	said("ACME ClusterIssuer "+all.Name, "spec.policy.allowedDNSNames", "every namespace of the cluster")
	sel := ci("acme-sel-"+ns, &pkiv1alpha1.ClusterIssuerPolicy{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}})
	said("ACME ClusterIssuer "+sel.Name, "spec.policy.allowedDNSNames", "namespaceSelector selects (team=web)")

	// Narrowed: no warning, on create and on update.
	narrowed := ci("acme-narrow-"+ns, &pkiv1alpha1.ClusterIssuerPolicy{AllowedDNSNames: []string{"*.{namespace}.apps.example.com"}})
	g.Expect(w.take()).To(BeEmpty(), "no warning for %s", narrowed.Name)
	self := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "self-" + ns},
		Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}}}
	g.Expect(admin.Create(ctx, self)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), self) })
	g.Expect(w.take()).To(BeEmpty(), "no warning for a selfSigned ClusterIssuer")
	// Widening it again (an update) is said again.
	patch := client.MergeFrom(narrowed.DeepCopy())
	narrowed.Spec.Policy = nil
	g.Expect(admin.Patch(ctx, narrowed, patch)).To(Succeed())
	said("ACME ClusterIssuer "+narrowed.Name, "every namespace of the cluster")
	g.Expect(strings.Join(w.take(), "")).To(BeEmpty())
}
