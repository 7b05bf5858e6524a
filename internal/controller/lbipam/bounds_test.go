package lbipam_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/lbipam"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// newPool creates a pool granted to namespace ns, deleted after the test.
func newPool(t *testing.T, name, ns, addr string, priority int32) *lbv1alpha1.IPAddressPool {
	t.Helper()
	p := &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: []string{addr},
		ServiceAllocation: &lbv1alpha1.ServiceAllocation{Namespaces: []string{ns}, Priority: priority}}}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pool: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(t.Context()), p) })
	return p
}

// service builds a LoadBalancer Service of n TCP ports from first, sharing
// its address under key (none when "").
func service(ns, name, key string, first, n int) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false)}}
	if key != "" {
		s.Annotations = map[string]string{lbv1alpha1.AllowSharedIPAnnotation: key}
	}
	for i := range n {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: corev1.ProtocolTCP, Port: int32(first + i)})
	}
	return s
}

// condition waits for the Service's LoadBalancerReady to carry reason and
// returns it; the Service then has no ingress.
func condition(t *testing.T, ns, name, reason string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		s := &corev1.Service{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		c := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(s.Status.LoadBalancer.Ingress).To(BeEmpty())
		got = c
	}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	return got
}

// warned waits for a Warning Event with reason on the Service.
func warned(t *testing.T, ns, name, reason string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(t.Context(), &evs, client.InNamespace(ns))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(HaveField("Reason", reason), HaveField("Type", corev1.EventTypeWarning),
			HaveField("Regarding.Name", name))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

func assignments(t *testing.T, pool string) []lbv1alpha1.Assignment {
	t.Helper()
	p := &lbv1alpha1.IPAddressPool{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: pool}, p); err != nil {
		t.Fatalf("reading pool: %v", err)
	}
	return p.Status.Assignments
}

// TestAssignmentsPerPoolAreBounded: with --lb-max-assignments-per-pool=3,
// three Services sharing one address by key fill the pool; a fourth
// (sharing too) gets no address, LoadBalancerReady False
// AssignmentLimitExceeded naming the bound and the pool, and a Warning
// Event, and the pool's assignments are left as they were. A second
// granted pool with room then serves it, as a pool without free addresses
// would be passed over.
func TestAssignmentsPerPoolAreBounded(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{lbipam.ControllerName}
		o.LBMaxAssignmentsPerPool = 3
	})
	ns := env.NewNamespace(t)
	first := newPool(t, "cap-"+ns, ns, "192.0.2.0/29", 0)
	for i := range 3 {
		g.Expect(env.Client.Create(ctx, service(ns, fmt.Sprintf("s%d", i), "k", 1000+10*i, 1))).To(Succeed())
		condition(t, ns, fmt.Sprintf("s%d", i), lbv1alpha1.AwaitingAnnouncementReason)
	}
	before := assignments(t, first.Name)
	g.Expect(before).To(HaveLen(3))

	g.Expect(env.Client.Create(ctx, service(ns, "s3", "k", 2000, 1))).To(Succeed())
	c := condition(t, ns, "s3", lbv1alpha1.AssignmentLimitExceededReason)
	g.Expect(c.Message).To(And(ContainSubstring(first.Name), ContainSubstring("3 assignments"), ContainSubstring("--lb-max-assignments-per-pool")))
	warned(t, ns, "s3", lbv1alpha1.AssignmentLimitExceededReason)
	g.Consistently(func() []lbv1alpha1.Assignment { return assignments(t, first.Name) }).
		WithTimeout(2 * time.Second).Should(Equal(before))

	second := newPool(t, "cap2-"+ns, ns, "192.0.2.8/29", 1)
	condition(t, ns, "s3", lbv1alpha1.AwaitingAnnouncementReason)
	g.Expect(assignments(t, second.Name)).To(ConsistOf(HaveField("Service.Name", "s3")))
	g.Expect(assignments(t, first.Name)).To(Equal(before))
}

// TestTooManyPorts: a Service of more ports than a pool's status records
// for one Service (128) gets no address, LoadBalancerReady False
// TooManyPorts naming the bound, and a Warning Event, instead of retrying a
// write the schema refuses; one that held an address and grows past the
// bound gives it back.
func TestTooManyPorts(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	env.StartManager(t, func(o *setup.Options) { o.Controllers = []string{lbipam.ControllerName} })
	ns := env.NewNamespace(t)
	pool := newPool(t, "ports-"+ns, ns, "192.0.2.16/29", 0)

	g.Expect(env.Client.Create(ctx, service(ns, "wide", "", 1000, lbv1alpha1.MaxAssignmentPorts+1))).To(Succeed())
	c := condition(t, ns, "wide", lbv1alpha1.TooManyPortsReason)
	g.Expect(c.Message).To(And(ContainSubstring("129 ports"), ContainSubstring("at most 128")))
	warned(t, ns, "wide", lbv1alpha1.TooManyPortsReason)
	g.Expect(assignments(t, pool.Name)).To(BeEmpty())

	// Exactly the bound is recorded.
	edge := service(ns, "edge", "", 1000, lbv1alpha1.MaxAssignmentPorts)
	g.Expect(env.Client.Create(ctx, edge)).To(Succeed())
	condition(t, ns, "edge", lbv1alpha1.AwaitingAnnouncementReason)
	g.Expect(assignments(t, pool.Name)).To(ConsistOf(HaveField("Service.Name", "edge")))

	// Growing past it releases the address.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(edge), edge)).To(Succeed())
	edge.Spec.Ports = append(edge.Spec.Ports, corev1.ServicePort{Name: "more", Protocol: corev1.ProtocolTCP, Port: 9999})
	g.Expect(env.Client.Update(ctx, edge)).To(Succeed())
	condition(t, ns, "edge", lbv1alpha1.TooManyPortsReason)
	g.Eventually(func() []lbv1alpha1.Assignment { return assignments(t, pool.Name) }).WithTimeout(30 * time.Second).Should(BeEmpty())
}

// TestSharingKeyTooLong: an allow-shared-ip value longer than a pool's
// status records (253 characters) gets no address, LoadBalancerReady False
// SharingKeyTooLong naming the annotation and the bound, and a Warning
// Event, instead of retrying a write the schema refuses; exactly 253 is
// recorded, a key that grows past the bound gives the address back, and
// one shortened again gets an address.
func TestSharingKeyTooLong(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	env.StartManager(t, func(o *setup.Options) { o.Controllers = []string{lbipam.ControllerName} })
	ns := env.NewNamespace(t)
	pool := newPool(t, "key-"+ns, ns, "192.0.2.24/29", 0)
	// Characters, as the schema counts them: 253 two-byte ones fit.
	edgeKey := strings.Repeat("é", lbv1alpha1.MaxSharingKeyLength)

	g.Expect(env.Client.Create(ctx, service(ns, "long", edgeKey+"k", 1000, 1))).To(Succeed())
	c := condition(t, ns, "long", lbv1alpha1.SharingKeyTooLongReason)
	g.Expect(c.Message).To(And(ContainSubstring(lbv1alpha1.AllowSharedIPAnnotation), ContainSubstring("254 characters"),
		ContainSubstring("at most 253")))
	g.Expect(c.Message).NotTo(ContainSubstring(edgeKey), "the message repeats the tenant's value")
	warned(t, ns, "long", lbv1alpha1.SharingKeyTooLongReason)
	g.Expect(assignments(t, pool.Name)).To(BeEmpty())

	edge := service(ns, "edge", edgeKey, 1000, 1)
	g.Expect(env.Client.Create(ctx, edge)).To(Succeed())
	condition(t, ns, "edge", lbv1alpha1.AwaitingAnnouncementReason)
	g.Expect(assignments(t, pool.Name)).To(ConsistOf(And(HaveField("Service.Name", "edge"), HaveField("SharingKey", edgeKey))))

	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(edge), edge)).To(Succeed())
	edge.Annotations[lbv1alpha1.AllowSharedIPAnnotation] = strings.Repeat("k", 64*1024)
	g.Expect(env.Client.Update(ctx, edge)).To(Succeed())
	condition(t, ns, "edge", lbv1alpha1.SharingKeyTooLongReason)
	g.Eventually(func() []lbv1alpha1.Assignment { return assignments(t, pool.Name) }).WithTimeout(30 * time.Second).Should(BeEmpty())

	// Fixed, it gets an address again.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(edge), edge)).To(Succeed())
	edge.Annotations[lbv1alpha1.AllowSharedIPAnnotation] = "k"
	g.Expect(env.Client.Update(ctx, edge)).To(Succeed())
	condition(t, ns, "edge", lbv1alpha1.AwaitingAnnouncementReason)
	g.Expect(assignments(t, pool.Name)).To(ConsistOf(And(HaveField("Service.Name", "edge"), HaveField("SharingKey", "k"))))
}
