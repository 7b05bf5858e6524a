package security

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// lbService creates a LoadBalancer Service as the tenant.
func lbService(t *testing.T, tn *tenant, name string, port int32, ann map[string]string) {
	t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name, Annotations: ann},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: port}}}}
	if err := tn.Client.Create(t.Context(), s); err != nil {
		t.Fatalf("tenant creating a LoadBalancer Service: %v", err)
	}
}

func lbReason(ctx context.Context, tn *tenant, name string) string {
	s := &corev1.Service{}
	if err := tn.Client.Get(ctx, client.ObjectKey{Namespace: tn.NS, Name: name}, s); err != nil {
		return ""
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition); c != nil {
		return c.Reason
	}
	return ""
}

// TestLoadBalancerPoolsStayWithTheirGrantees: a tenant cannot create or
// edit pools, cannot name a pool granted to another namespace, cannot take
// another tenant's address (even with its sharing key and free ports), and
// cannot request an address from a pool it was not granted.
func TestLoadBalancerPoolsStayWithTheirGrantees(t *testing.T) {
	a, b := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	pool := grantedPool(t, "sec-"+a.NS, "198.18.0.0/29", a.NS)

	// Pools are the admin's: a tenant can neither create nor widen one.
	own := &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "mine-" + b.NS},
		Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: []string{"198.18.1.0/29"}}}
	g.Expect(apierrors.IsForbidden(b.Client.Create(ctx, own))).To(BeTrue(), "a tenant created an IPAddressPool")
	widened := pool.DeepCopy()
	widened.Spec.ServiceAllocation.Namespaces = append(widened.Spec.ServiceAllocation.Namespaces, b.NS)
	g.Expect(apierrors.IsForbidden(b.Client.Update(ctx, widened))).To(BeTrue(), "a tenant granted itself a pool")

	lbService(t, a, "web", 80, map[string]string{lbv1alpha1.PoolAnnotation: pool.Name, lbv1alpha1.AllowSharedIPAnnotation: "k"})
	var addr string
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
		g.Expect(pool.Status.Assignments).To(HaveLen(1))
		addr = pool.Status.Assignments[0].Address
	}).WithTimeout(30 * time.Second).Should(Succeed())

	lbService(t, b, "named", 80, map[string]string{lbv1alpha1.PoolAnnotation: pool.Name})
	lbService(t, b, "hijack", 443, map[string]string{lbv1alpha1.AddressAnnotation: addr, lbv1alpha1.AllowSharedIPAnnotation: "k"})
	lbService(t, b, "request", 80, map[string]string{lbv1alpha1.AddressAnnotation: "198.18.0.5"})
	for name, want := range map[string]string{
		"named":   lbv1alpha1.PoolNotAllowedReason,
		"hijack":  lbv1alpha1.AddressUnavailableReason,
		"request": lbv1alpha1.AddressUnavailableReason,
	} {
		g.Eventually(func() string { return lbReason(ctx, b, name) }).WithTimeout(30*time.Second).Should(Equal(want), name)
	}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
	for _, as := range pool.Status.Assignments {
		g.Expect(as.Service.Namespace).To(Equal(a.NS), "tenant b holds %s from a pool granted to a", as.Address)
	}
}

// TestPoolWebhookAnswersFromTheCache: 100 AdmissionReviews for an
// IPAddressPool, posted straight to the webhook port as anyone reaching it
// can, are answered (overlap with an existing pool refused) from the
// manager's cache: the API server counts no LIST of IPAddressPools per
// review (it counted one each when the webhook read past the cache).
func TestPoolWebhookAnswersFromTheCache(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	existing := &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "sec-reads"},
		Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: []string{"198.18.7.0/29"}}}
	g.Expect(env.Client.Create(ctx, existing)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), existing) })
	overlapping := &lbv1alpha1.IPAddressPool{TypeMeta: metav1.TypeMeta{APIVersion: lbv1alpha1.GroupVersion.String(), Kind: "IPAddressPool"},
		ObjectMeta: metav1.ObjectMeta{Name: "sec-reads-flood"},
		Spec:       lbv1alpha1.IPAddressPoolSpec{Addresses: []string{"198.18.7.4/30"}}}
	gvk := metav1.GroupVersionKind{Group: lbv1alpha1.GroupVersion.Group, Version: lbv1alpha1.GroupVersion.Version, Kind: "IPAddressPool"}
	const path = "/validate-lb-converge-dev-v1alpha1-ipaddresspool"
	// The first review warms the cache (and proves the cache sees the pool).
	g.Eventually(func() int { return postReviews(t, path, gvk, "ipaddresspools", overlapping, 1) }).
		WithTimeout(10 * time.Second).Should(BeZero())
	before := apiRequests(t, []string{"ipaddresspools"}, "LIST")
	g.Expect(postReviews(t, path, gvk, "ipaddresspools", overlapping, 100)).To(BeZero(), "an overlapping pool was allowed")
	after := apiRequests(t, []string{"ipaddresspools"}, "LIST")
	g.Expect(after-before).To(BeNumerically("<", 5), "100 AdmissionReviews cost %v LISTs of IPAddressPools", after-before)
}

// TestListenersPerNamespaceAreBounded: a tenant granted a pool cannot grow
// the agents' data plane without bound. With the chart's default of 256
// listeners per namespace, two Services of 100 ports get an address and a
// third one of 100 does not: LoadBalancerReady False,
// ListenerLimitExceeded, naming the bound and the namespace, and a Warning
// Event. Another namespace's Service, assigned after, is untouched.
func TestListenersPerNamespaceAreBounded(t *testing.T) {
	attacker, victim := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	grantedPool(t, "sec-"+attacker.NS, "198.18.9.0/29", attacker.NS)
	grantedPool(t, "sec-"+victim.NS, "198.18.9.8/29", victim.NS)
	many := func(tn *tenant, name string, n int) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false)}}
		for i := range n {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: corev1.ProtocolTCP, Port: int32(1000 + i)})
		}
		g.Expect(tn.Client.Create(ctx, s)).To(Succeed())
		return s
	}
	for _, name := range []string{"big1", "big2"} {
		many(attacker, name, 100)
		g.Eventually(func() string { return lbReason(ctx, attacker, name) }).WithTimeout(30*time.Second).
			ShouldNot(Or(BeEmpty(), Equal(lbv1alpha1.ListenerLimitExceededReason)), name)
	}
	more := many(attacker, "more", 100)
	g.Eventually(func(g Gomega) {
		s := &corev1.Service{}
		g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(more), s)).To(Succeed())
		c := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(lbv1alpha1.ListenerLimitExceededReason))
		g.Expect(c.Message).To(And(ContainSubstring(attacker.NS), ContainSubstring("allows 256"), ContainSubstring("300 listeners")))
		g.Expect(s.Status.LoadBalancer.Ingress).To(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(attacker.NS))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(HaveField("Reason", lbv1alpha1.ListenerLimitExceededReason),
			HaveField("Regarding.Name", "more"))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	pool := &lbv1alpha1.IPAddressPool{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "sec-" + attacker.NS}, pool)).To(Succeed())
	for _, a := range pool.Status.Assignments {
		g.Expect(a.Service.Name).NotTo(Equal("more"), "the Service past the bound holds %s", a.Address)
	}
	// The victim, in its own namespace, is not counted with the attacker.
	lbService(t, victim, "web", 80, nil)
	g.Eventually(func() string { return lbReason(ctx, victim, "web") }).WithTimeout(30 * time.Second).
		ShouldNot(Or(BeEmpty(), Equal(lbv1alpha1.ListenerLimitExceededReason)))
}

// TestPoolAssignmentsAreBounded: tenants granted one pool cannot grow its
// status (and every reconcile that reads it) without bound by sharing
// addresses. With the suite's bound of 16 assignments per pool (see
// chartDefaults), two tenants fill a /29 pool with 8 one-port Services
// each, all sharing one address per namespace under allow-shared-ip (within the listener bound);
// a third tenant's Service then gets no address: LoadBalancerReady False,
// AssignmentLimitExceeded, naming the bound and the pool, a Warning Event,
// and the pool's assignments unchanged. A Service of 129 ports gets
// TooManyPorts naming the schema's 128, instead of retrying without a
// condition.
func TestPoolAssignmentsAreBounded(t *testing.T) {
	const perTenant = suiteMaxAssignmentsPerPool / 2
	a, b, c := newTenant(t), newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	pool := grantedPool(t, "sec-cap-"+c.NS, "198.18.11.0/29", a.NS, b.NS, c.NS)

	// 2 × 8 Services, created 16 at a time.
	type job struct {
		tn *tenant
		i  int
	}
	jobs, errs := make(chan job), make(chan error, 2*perTenant)
	for range 16 {
		go func() {
			for j := range jobs {
				s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: j.tn.NS, Name: fmt.Sprintf("s%d", j.i),
					Annotations: map[string]string{lbv1alpha1.AllowSharedIPAnnotation: "k"}},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
						Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: int32(1000 + j.i)}}}}
				errs <- j.tn.Client.Create(ctx, s)
			}
		}()
	}
	for _, tn := range []*tenant{a, b} {
		for i := range perTenant {
			jobs <- job{tn, i}
		}
	}
	close(jobs)
	for range 2 * perTenant {
		g.Expect(<-errs).To(Succeed(), "a tenant creating a LoadBalancer Service")
	}
	var before []lbv1alpha1.Assignment
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
		g.Expect(pool.Status.Assignments).To(HaveLen(2 * perTenant))
		before = pool.Status.Assignments
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

	lbService(t, c, "late", 80, nil)
	g.Eventually(func(g Gomega) {
		s := &corev1.Service{}
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: c.NS, Name: "late"}, s)).To(Succeed())
		cond := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(lbv1alpha1.AssignmentLimitExceededReason))
		g.Expect(cond.Message).To(And(ContainSubstring(pool.Name), ContainSubstring(fmt.Sprintf("%d assignments", suiteMaxAssignmentsPerPool))))
		g.Expect(s.Status.LoadBalancer.Ingress).To(BeEmpty())
	}).WithTimeout(2 * time.Minute).Should(Succeed())

	wide := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: c.NS, Name: "wide"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false)}}
	for i := range 129 {
		wide.Spec.Ports = append(wide.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: corev1.ProtocolTCP, Port: int32(2000 + i)})
	}
	g.Expect(c.Client.Create(ctx, wide)).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := &corev1.Service{}
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(wide), s)).To(Succeed())
		cond := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(lbv1alpha1.TooManyPortsReason))
		g.Expect(cond.Message).To(ContainSubstring("at most 128"))
	}).WithTimeout(2 * time.Minute).Should(Succeed())

	g.Eventually(func(g Gomega) {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(c.NS))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(HaveField("Reason", lbv1alpha1.AssignmentLimitExceededReason),
			HaveField("Type", corev1.EventTypeWarning), HaveField("Regarding.Name", "late"))))
		g.Expect(evs.Items).To(ContainElement(And(HaveField("Reason", lbv1alpha1.TooManyPortsReason),
			HaveField("Type", corev1.EventTypeWarning), HaveField("Regarding.Name", "wide"))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
	g.Expect(pool.Status.Assignments).To(Equal(before), "the pool changed when a Service past its bound was refused")
}

// TestLongSharingKeyIsRefused: a tenant's allow-shared-ip value of 64 KiB
// (the Service API takes it; a pool's status records 253 characters) gets
// its Service no address: LoadBalancerReady False SharingKeyTooLong naming
// the annotation, without the value, and a Warning Event, and the pool is
// untouched. Before, every status patch with it failed and the Service was
// retried for ever without a word. Another tenant of the same pool is
// served as before.
func TestLongSharingKeyIsRefused(t *testing.T) {
	attacker, victim := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	pool := grantedPool(t, "sec-key-"+attacker.NS, "198.18.13.0/29", attacker.NS, victim.NS)

	key := strings.Repeat("k", 64*1024)
	lbService(t, attacker, "long", 80, map[string]string{lbv1alpha1.AllowSharedIPAnnotation: key})
	g.Eventually(func(g Gomega) {
		s := &corev1.Service{}
		g.Expect(attacker.Client.Get(ctx, client.ObjectKey{Namespace: attacker.NS, Name: "long"}, s)).To(Succeed())
		c := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(lbv1alpha1.SharingKeyTooLongReason))
		g.Expect(c.Message).To(And(ContainSubstring(lbv1alpha1.AllowSharedIPAnnotation), ContainSubstring("at most 253")))
		g.Expect(len(c.Message)).To(BeNumerically("<", 512), "the condition repeats the tenant's value")
		g.Expect(s.Status.LoadBalancer.Ingress).To(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(attacker.NS))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(HaveField("Reason", lbv1alpha1.SharingKeyTooLongReason),
			HaveField("Type", corev1.EventTypeWarning), HaveField("Regarding.Name", "long"))))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	lbService(t, victim, "web", 80, nil)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
		g.Expect(pool.Status.Assignments).To(ConsistOf(And(HaveField("Service.Namespace", victim.NS), HaveField("Service.Name", "web"))),
			"the victim got no address, or the long key reached the pool")
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(lbReason(ctx, attacker, "long")).To(Equal(lbv1alpha1.SharingKeyTooLongReason))
}

// grantedPool creates the cluster admin's IPAddressPool name of addresses
// cidr, granted to namespaces only, and deletes it when the test ends.
func grantedPool(t *testing.T, name, cidr string, namespaces ...string) *lbv1alpha1.IPAddressPool {
	t.Helper()
	pool := &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: []string{cidr},
			ServiceAllocation: &lbv1alpha1.ServiceAllocation{Namespaces: namespaces}}}
	if err := env.Client.Create(t.Context(), pool); err != nil {
		t.Fatalf("creating pool %s: %v", name, err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(t.Context()), pool) })
	return pool
}
