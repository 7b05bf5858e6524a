package lbagent_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestAllocation covers the allocator's answers without a data plane:
// AwaitingAnnouncement until an agent probes, PoolExhausted (Service and
// pool), release on delete, a requested address, sharing by key, and
// PoolNotAllowed for a pool not granted to the namespace.
func TestAllocation(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	startIPAM(t)
	newPool(t, "alloc", ns, []string{"192.0.2.0/31"}, nil)
	newPool(t, "private", "", []string{"192.0.2.8/30"}, func(p *lbv1alpha1.IPAddressPool) {
		p.Spec.ServiceAllocation = &lbv1alpha1.ServiceAllocation{Namespaces: []string{"someone-else"}}
	})

	g.Eventually(func(g Gomega) {
		p := &lbv1alpha1.IPAddressPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "private"}, p)).To(Succeed())
		g.Expect(p.Status.Available).To(BeEquivalentTo(4))
		g.Expect(p.Status.Conditions).To(ContainElement(HaveField("Reason", lbv1alpha1.AddressesAvailableReason)))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	newService(t, ns, "a", nil)
	newService(t, ns, "b", nil)
	waitReason(t, ns, "a", lbv1alpha1.AwaitingAnnouncementReason)
	waitReason(t, ns, "b", lbv1alpha1.AwaitingAnnouncementReason)
	g.Expect(assignedAddress(ctx, "alloc", ns, "a")).NotTo(Equal(assignedAddress(ctx, "alloc", ns, "b")))

	newService(t, ns, "c", nil)
	waitReason(t, ns, "c", lbv1alpha1.PoolExhaustedReason)
	g.Eventually(func(g Gomega) {
		p := &lbv1alpha1.IPAddressPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "alloc"}, p)).To(Succeed())
		g.Expect(p.Status.Assigned).To(BeEquivalentTo(2))
		g.Expect(p.Status.Available).To(BeEquivalentTo(0))
		g.Expect(p.Status.Conditions).To(ContainElement(HaveField("Reason", lbv1alpha1.PoolExhaustedReason)))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Deleting a releases its address to c.
	freed := assignedAddress(ctx, "alloc", ns, "a")
	g.Expect(env.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}})).To(Succeed())
	waitReason(t, ns, "c", lbv1alpha1.AwaitingAnnouncementReason)
	g.Expect(assignedAddress(ctx, "alloc", ns, "c")).To(Equal(freed))
	g.Eventually(func(g Gomega) {
		p := &lbv1alpha1.IPAddressPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "alloc"}, p)).To(Succeed())
		g.Expect(p.Status.Conditions).To(ContainElement(HaveField("Reason", lbv1alpha1.PoolExhaustedReason)))
	}).Should(Succeed())

	// Requesting b's address without a sharing key: refused, named.
	taken := assignedAddress(ctx, "alloc", ns, "b")
	newService(t, ns, "d", func(s *corev1.Service) {
		s.Annotations = map[string]string{lbv1alpha1.AddressAnnotation: taken}
	})
	c := waitReason(t, ns, "d", lbv1alpha1.AddressUnavailableReason)
	g.Expect(c.Message).To(ContainSubstring(taken))

	// Sharing: same key, same namespace, ports that do not collide.
	shared := func(name string, port int32) {
		newService(t, ns, name, func(s *corev1.Service) {
			s.Annotations = map[string]string{lbv1alpha1.AllowSharedIPAnnotation: "k", lbv1alpha1.PoolAnnotation: "alloc"}
			s.Spec.Ports = s.Spec.Ports[:1]
			s.Spec.Ports[0].Port = port
		})
	}
	g.Expect(env.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}})).To(Succeed())
	g.Expect(env.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d"}})).To(Succeed())
	shared("s1", 80)
	waitReason(t, ns, "s1", lbv1alpha1.AwaitingAnnouncementReason)
	shared("s2", 443)
	waitReason(t, ns, "s2", lbv1alpha1.AwaitingAnnouncementReason)
	g.Expect(assignedAddress(ctx, "alloc", ns, "s2")).To(Equal(assignedAddress(ctx, "alloc", ns, "s1")))
	shared("s3", 80) // collides with s1 on TCP/80, and the pool is full
	waitReason(t, ns, "s3", lbv1alpha1.PoolExhaustedReason)

	// A pool granted to another namespace cannot be named.
	newService(t, ns, "p", func(s *corev1.Service) {
		s.Annotations = map[string]string{lbv1alpha1.PoolAnnotation: "private"}
	})
	waitReason(t, ns, "p", lbv1alpha1.PoolNotAllowedReason)
}

// TestPoolAdmission: invalid and overlapping pools are refused naming
// spec.addresses; nothing is created.
func TestPoolAdmission(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	newPool(t, "adm", "", []string{"198.51.100.0/28"}, nil)
	for name, addrs := range map[string][]string{
		"bad-cidr":  {"198.51.100.300/32"},
		"host-bits": {"203.0.113.1/28"},
		"overlap":   {"198.51.100.8-198.51.100.20"},
		"backwards": {"203.0.113.9-203.0.113.1"},
	} {
		err := env.Client.Create(ctx, &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: addrs}})
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
		g.Expect(err.Error()).To(ContainSubstring("spec.addresses"), name)
	}
}

// TestNoDoubleAssignmentAcrossRestart creates Services while the allocator
// is stopped mid-way and one is deleted while it is down; after a restart
// every Service has exactly one address and no address has two Services.
func TestNoDoubleAssignmentAcrossRestart(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	newPool(t, "restart", ns, []string{"203.0.113.0/27"}, nil)
	stop := startIPAM(t)
	const n = 24
	for i := range n {
		newService(t, ns, fmt.Sprintf("s%02d", i), nil)
		if i == n/2 {
			g.Expect(stop()).To(Succeed())
		}
	}
	g.Expect(env.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s03"}})).To(Succeed())
	startIPAM(t)
	g.Eventually(func(g Gomega) {
		p := &lbv1alpha1.IPAddressPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "restart"}, p)).To(Succeed())
		byAddr, bySvc := map[string]string{}, map[string]int{}
		for _, a := range p.Status.Assignments {
			g.Expect(byAddr).NotTo(HaveKey(a.Address), "address given twice")
			byAddr[a.Address] = a.Service.Name
			bySvc[a.Service.Name]++
		}
		g.Expect(bySvc).To(HaveLen(n - 1))
		g.Expect(bySvc).NotTo(HaveKey("s03"))
	}).WithTimeout(60 * time.Second).Should(Succeed())
}
