package security

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// clusterCA makes a CA ClusterIssuer (its Secret in the chart's cluster
// resource namespace) with the given policy, removed with the test.
func clusterCA(t *testing.T, g Gomega, name string, policy *pkiv1alpha1.ClusterIssuerPolicy) *pkiv1alpha1.ClusterIssuer {
	t.Helper()
	ctx := t.Context()
	const clusterNS = "converge-system" // the chart's --cluster-resource-namespace
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sec := caSecret(t, clusterNS, name)
	g.Expect(env.Client.Create(ctx, sec)).To(Succeed())
	ci := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: sec.Name}}, Policy: policy}}
	g.Expect(env.Client.Create(ctx, ci)).To(Succeed())
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = env.Client.Delete(ctx, ci)
		_ = env.Client.Delete(ctx, sec)
	})
	return ci
}

// askClusterIssuer creates, as tn, a CertificateRequest of ci for the names
// and waits for its outcome (Ready no longer Pending).
func askClusterIssuer(t *testing.T, g Gomega, tn *tenant, ci *pkiv1alpha1.ClusterIssuer, name string, spec pkiv1alpha1.CertificateSpec) *pkiv1alpha1.CertificateRequest {
	t.Helper()
	return askFor(t, g, tn, pkiv1alpha1.IssuerReference{Kind: "ClusterIssuer", Name: ci.Name}, "", name, spec, 30*time.Second)
}

// askFor creates, as tn, a CertificateRequest of issuer for spec's names
// (labelled for shard when not empty), and waits up to timeout for its
// outcome (Ready no longer Pending).
func askFor(t *testing.T, g Gomega, tn *tenant, issuer pkiv1alpha1.IssuerReference, shard, name string, spec pkiv1alpha1.CertificateSpec, timeout time.Duration) *pkiv1alpha1.CertificateRequest {
	t.Helper()
	key, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	g.Expect(err).NotTo(HaveOccurred())
	csr, err := pki.BuildCSR(&spec, key)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("request %s for %v %v %q", name, spec.DNSNames, spec.IPAddresses, spec.CommonName)
	return askWithCSR(t, g, tn, issuer, shard, name, csr, timeout)
}

// askWithCSR is askFor with the request's PEM CSR as given (a hand-written
// one carries what no Certificate asks for).
func askWithCSR(t *testing.T, g Gomega, tn *tenant, issuer pkiv1alpha1.IssuerReference, shard, name string, csr []byte, timeout time.Duration) *pkiv1alpha1.CertificateRequest {
	t.Helper()
	ctx := t.Context()
	cr := &pkiv1alpha1.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name},
		Spec: pkiv1alpha1.CertificateRequestSpec{Request: csr, IssuerRef: issuer}}
	if shard != "" {
		cr.Labels = map[string]string{setup.ShardLabel: shard}
	}
	g.Expect(tn.Client.Create(ctx, cr)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(cr), cr)).To(Succeed())
		c := meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).NotTo(Equal(pkiv1alpha1.PendingReason), c.Message)
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
	c := meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)
	t.Logf("request %s: Ready %s %s", name, c.Reason, c.Message)
	return cr
}

// expectDenied checks that a request was refused by the issuer's policy:
// Denied and Stalled with IssuerPolicyDenied, Ready=False, the message
// naming what, and no certificate.
func expectDenied(g Gomega, cr *pkiv1alpha1.CertificateRequest, words ...string) {
	testenv.HasCondition(g, cr.Status.Conditions, pkiv1alpha1.DeniedCondition, metav1.ConditionTrue, pkiv1alpha1.IssuerPolicyDeniedReason)
	testenv.HasCondition(g, cr.Status.Conditions, creconcile.StalledCondition, metav1.ConditionTrue, pkiv1alpha1.IssuerPolicyDeniedReason)
	testenv.HasCondition(g, cr.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.FailedReason)
	d := meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.DeniedCondition)
	for _, w := range words {
		g.Expect(d.Message).To(ContainSubstring(w))
	}
	g.Expect(cr.Status.Certificate).To(BeEmpty(), "the ClusterIssuer signed a refused request")
}

// A CA ClusterIssuer signs for every namespace with a key every namespace
// trusts. Without a policy, tenant A got a leaf for tenant B's Service
// (svc-b.<B>.svc, *.<B>.svc.cluster.local) and B's SPIFFE ID, and could
// pass for it to every client trusting the cluster CA. By default, a
// cluster-internal name or SPIFFE ID is now signed only for a request of
// its own namespace: A's own Service name is issued, B's are Denied
// (IssuerPolicyDenied) naming the name, and B is untouched. A Certificate
// asking for B's name reads the refusal in its Ready condition.
func TestClusterIssuerSignsNoOtherNamespacesName(t *testing.T) {
	attacker, victim := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	ci := clusterCA(t, g, "cluster-ca-"+attacker.NS, nil)

	for name, spec := range map[string]pkiv1alpha1.CertificateSpec{
		"svc-b":     {DNSNames: []string{"svc-a." + attacker.NS + ".svc", "svc-b." + victim.NS + ".svc"}},
		"wildcard":  {DNSNames: []string{"*." + victim.NS + ".svc.cluster.local"}},
		"other-dom": {DNSNames: []string{"svc-b." + victim.NS + ".svc.corp.internal"}},
		"pod":       {DNSNames: []string{"10-0-0-7." + victim.NS + ".pod.cluster.local"}},
		"cn":        {CommonName: "svc-b." + victim.NS + ".svc"},
	} {
		cr := askClusterIssuer(t, g, attacker, ci, name, spec)
		expectDenied(g, cr, victim.NS, `ClusterIssuer "`+ci.Name+`"`, "cluster-internal name")
	}
	spiffe := askClusterIssuer(t, g, attacker, ci, "spiffe", pkiv1alpha1.CertificateSpec{
		CommonName: "svc-a", URIs: []string{"spiffe://cluster.local/ns/" + victim.NS + "/sa/default"}})
	expectDenied(g, spiffe, "spiffe://cluster.local/ns/"+victim.NS+"/sa/default", "identity of namespace "+victim.NS)

	own := askClusterIssuer(t, g, attacker, ci, "own", pkiv1alpha1.CertificateSpec{
		DNSNames: []string{"svc-a." + attacker.NS + ".svc", "*.svc-a." + attacker.NS + ".svc.cluster.local", "www.example.com"},
		URIs:     []string{"spiffe://cluster.local/ns/" + attacker.NS + "/sa/default"}})
	testenv.HasCondition(g, own.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.IssuedReason)
	g.Expect(own.Status.Certificate).NotTo(BeEmpty())

	// Through a Certificate: the person reads the refusal on it.
	c := &pkiv1alpha1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "impersonate"},
		Spec: pkiv1alpha1.CertificateSpec{SecretName: "impersonate-tls", DNSNames: []string{"svc-b." + victim.NS + ".svc"},
			IssuerRef: pkiv1alpha1.IssuerReference{Kind: "ClusterIssuer", Name: ci.Name}}}
	g.Expect(attacker.Client.Create(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
		r := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(r.Message).To(ContainSubstring(pkiv1alpha1.IssuerPolicyDeniedReason))
		g.Expect(r.Message).To(ContainSubstring("svc-b." + victim.NS + ".svc"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	var s corev1.Secret
	if err := attacker.Client.Get(ctx, client.ObjectKey{Namespace: attacker.NS, Name: "impersonate-tls"}, &s); err == nil {
		g.Expect(s.Data[corev1.TLSCertKey]).To(BeEmpty(), "the tenant holds a certificate for another namespace's Service")
	}

	// The victim is untouched: nothing was written in its namespace.
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(env.Client.List(ctx, &crs, client.InNamespace(victim.NS))).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty())
	var secrets corev1.SecretList
	g.Expect(env.Client.List(ctx, &secrets, client.InNamespace(victim.NS))).To(Succeed())
	for _, s := range secrets.Items {
		g.Expect(s.Type).NotTo(Equal(corev1.SecretTypeTLS), "a TLS Secret appeared in the victim's namespace: %s", s.Name)
	}
}

// A ClusterIssuer's spec.policy narrows it further: namespaceSelector says
// whose requests it signs and allowedDNSNames which names, "{namespace}"
// standing for the requester's. A namespace it does not select is Denied
// naming the selector; a selected one gets its own names and no other.
func TestClusterIssuerPolicy(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	ci := clusterCA(t, g, "cluster-policy-"+tn.NS, &pkiv1alpha1.ClusterIssuerPolicy{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pki.example.com/cluster-ca": "allowed"}},
		AllowedDNSNames:   []string{"*.{namespace}.svc", "*.{namespace}.svc.cluster.local"},
	})

	notSelected := askClusterIssuer(t, g, tn, ci, "not-selected", pkiv1alpha1.CertificateSpec{DNSNames: []string{"svc-a." + tn.NS + ".svc"}})
	expectDenied(g, notSelected, "spec.policy.namespaceSelector", "namespace "+tn.NS)

	// The tenant cannot label its own namespace; the admin does.
	var ns corev1.Namespace
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: tn.NS}, &ns)).To(Succeed())
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Labels["pki.example.com/cluster-ca"] = "allowed"
	g.Expect(tn.Client.Patch(ctx, &ns, patch)).NotTo(Succeed(), "a tenant labelled its own namespace")
	g.Expect(env.Client.Patch(ctx, &ns, patch)).To(Succeed())

	// The informer may not have the label yet: the first request is asked
	// until it is not refused for the selector.
	attempt := 0
	g.Eventually(func(g Gomega) {
		attempt++
		cr := askClusterIssuer(t, g, tn, ci, fmt.Sprintf("own-%d", attempt), pkiv1alpha1.CertificateSpec{
			DNSNames: []string{"svc-a." + tn.NS + ".svc", "svc-a." + tn.NS + ".svc.cluster.local"}})
		testenv.HasCondition(g, cr.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.IssuedReason)
	}).WithTimeout(30 * time.Second).Should(Succeed())

	outside := askClusterIssuer(t, g, tn, ci, "outside", pkiv1alpha1.CertificateSpec{DNSNames: []string{"svc-a." + tn.NS + ".svc", "www.example.com"}})
	expectDenied(g, outside, `"www.example.com"`, "spec.policy.allowedDNSNames", `"*.{namespace}.svc"`)
	other := askClusterIssuer(t, g, tn, ci, "other", pkiv1alpha1.CertificateSpec{DNSNames: []string{"svc-b.kube-system.svc"}})
	expectDenied(g, other, `"svc-b.kube-system.svc"`, "spec.policy.allowedDNSNames")
}
