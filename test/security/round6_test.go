package security

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/testenv"
)

// A tenant deleting its Machine drains the Machine's Node, and a Pod of
// another namespace may run there (one that tolerates the tenant taint, or
// bound by nodeName). The drain evicts it, as it must, but what the tenant
// reads (the Machine's Deleting message, the Events of its namespace) never
// names it: its namespace and name are another tenant's.
func TestMachineDrainNamesNoOtherNamespacesPod(t *testing.T) {
	attacker, victim := newTenant(t, readEvents), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()

	km := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "drained"}}
	g.Expect(attacker.Client.Create(ctx, km)).To(Succeed())
	m := machineNaming(attacker.NS, "drained", infrastructurev1alpha1.GroupVersion.String(), "KwokMachine", km.Name)
	g.Expect(attacker.Client.Create(ctx, m)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Status.NodeRef).NotTo(BeNil())
		g.Expect(m.Status.NodeRef.UID).NotTo(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	node := m.Status.NodeRef.Name

	// The victim's Pod on the tenant's Node (created by the admin: bound
	// by nodeName, tolerating the taint). No kubelet here: evicted, it
	// stays Terminating, so the drain waits on it.
	secret := podOnNode(victim.NS, "payroll-export-7f9c", node)
	g.Expect(env.Client.Create(ctx, secret)).To(Succeed())
	t.Cleanup(func() {
		// Let the drain finish so that the Machine goes with the test.
		_ = env.Client.Delete(context.WithoutCancel(ctx), secret, client.GracePeriodSeconds(0))
	})
	own := podOnNode(attacker.NS, "mine", node)
	g.Expect(attacker.Client.Create(ctx, own)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), own, client.GracePeriodSeconds(0)) })

	g.Expect(attacker.Client.Delete(ctx, m)).To(Succeed())
	leaks := func(s string) bool {
		return strings.Contains(s, victim.NS) || strings.Contains(s, secret.Name)
	}
	// The drain ran: the victim's Pod was evicted, and the Machine says it
	// waits on two Pods.
	g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(secret), p)).To(Succeed())
		g.Expect(p.DeletionTimestamp).NotTo(BeNil(), "the drain evicted the victim's Pod")
		g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		c := meta.FindStatusCondition(m.Status.Conditions, machinev1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(machinev1alpha1.DrainingReason))
		g.Expect(c.Message).To(ContainSubstring("2 Pod(s) left"))
		g.Expect(c.Message).To(ContainSubstring(attacker.NS+"/mine"), "the tenant's own Pod is named")
	}).WithTimeout(30 * time.Second).Should(Succeed())
	// The evictions are recorded in the tenant's Events (the tenant's own
	// Pod by name).
	var evs corev1.EventList
	g.Eventually(func(g Gomega) {
		g.Expect(attacker.Client.List(ctx, &evs, client.InNamespace(attacker.NS))).To(Succeed())
		n := 0
		for _, e := range evs.Items {
			if e.Reason == "Evicted" {
				n++
			}
		}
		g.Expect(n).To(BeNumerically(">=", 2), "both evictions are recorded")
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Nothing the tenant reads names the victim's Pod.
	g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
	for _, c := range m.Status.Conditions {
		g.Expect(leaks(c.Message)).To(BeFalse(), "condition %s: %q", c.Type, c.Message)
	}
	for _, e := range evs.Items {
		g.Expect(leaks(e.Message)).To(BeFalse(), "Event %s: %q", e.Reason, e.Message)
		if e.Related != nil {
			g.Expect(e.Related.Namespace).NotTo(Equal(victim.NS), "Event %s names the victim's Pod as related: %+v", e.Reason, e.Related)
		}
	}

	// The drain finishes when the Pods go.
	g.Expect(env.Client.Delete(ctx, secret, client.GracePeriodSeconds(0))).To(Succeed())
	g.Expect(env.Client.Delete(ctx, own, client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(attacker.Client.Get(ctx, client.ObjectKeyFromObject(m), m))
	}).WithTimeout(60 * time.Second).Should(BeTrue())
}

// readEvents is the built-in edit role's (through view) reading of Events.
var readEvents = rbacv1.PolicyRule{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}}

// A CA ClusterIssuer signs for every namespace. A tenant asking it for a CA
// certificate (a CertificateRequest with isCA: true) would hold a CA under
// the cluster's, and mint, offline, certificates for any name that every
// namespace trusting that CA accepts. The request is refused naming
// spec.isCA (InvalidRequest, final); a leaf from the same ClusterIssuer is
// still issued.
func TestClusterIssuerSignsNoTenantCA(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	const clusterNS = "converge-system" // the chart's --cluster-resource-namespace
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sec := caSecret(t, clusterNS, "cluster-ca-"+tn.NS)
	g.Expect(env.Client.Create(ctx, sec)).To(Succeed())
	ci := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "cluster-ca-" + tn.NS},
		Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{CA: &pkiv1alpha1.CAIssuer{SecretName: sec.Name}}}}
	g.Expect(env.Client.Create(ctx, ci)).To(Succeed())
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = env.Client.Delete(ctx, ci)
		_ = env.Client.Delete(ctx, sec)
	})

	request := func(name string, isCA bool) *pkiv1alpha1.CertificateRequest {
		key, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
		g.Expect(err).NotTo(HaveOccurred())
		csr, err := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{CommonName: name, DNSNames: []string{name + "." + tn.NS + ".svc"}}, key)
		g.Expect(err).NotTo(HaveOccurred())
		cr := &pkiv1alpha1.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name},
			Spec: pkiv1alpha1.CertificateRequestSpec{Request: csr, IsCA: isCA,
				IssuerRef: pkiv1alpha1.IssuerReference{Kind: "ClusterIssuer", Name: ci.Name}}}
		g.Expect(tn.Client.Create(ctx, cr)).To(Succeed())
		return cr
	}
	ready := func(cr *pkiv1alpha1.CertificateRequest) *metav1.Condition {
		var c *metav1.Condition
		g.Eventually(func(g Gomega) {
			g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(cr), cr)).To(Succeed())
			c = meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).NotTo(Equal(pkiv1alpha1.PendingReason))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		return c
	}

	sub := request("sub-ca", true)
	c := ready(sub)
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse), "a tenant got a CA certificate from the ClusterIssuer")
	g.Expect(c.Reason).To(Equal(pkiv1alpha1.FailedReason))
	g.Expect(c.Message).To(ContainSubstring("spec.isCA"))
	testenv.HasCondition(g, sub.Status.Conditions, pkiv1alpha1.InvalidRequestCondition, metav1.ConditionTrue, pkiv1alpha1.InvalidRequestReason)
	g.Expect(sub.Status.Certificate).To(BeEmpty())

	leaf := request("leaf", false)
	c = ready(leaf)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", c.Reason, c.Message)
	b, _ := pem.Decode(leaf.Status.Certificate)
	g.Expect(b).NotTo(BeNil())
	crt, err := x509.ParseCertificate(b.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(crt.IsCA).To(BeFalse())
}

// podOnNode is a Pod of namespace ns bound to node by nodeName and
// tolerating every taint (so the tenant taint does not keep it off).
func podOnNode(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
}
