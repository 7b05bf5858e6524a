package lbagent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/lbipam"
	"github.com/converge-dev/converge/internal/lbagent"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/setup"
)

func startIPAM(t *testing.T) func() error {
	t.Helper()
	return env.StartManager(t, func(o *setup.Options) { o.Controllers = []string{lbipam.ControllerName} })
}

// newPool creates a pool granted to namespace ns (cluster-scoped; deleted
// after the test). Granting keeps Services of earlier tests, whose
// namespaces linger without a namespace controller, out of it.
func newPool(t *testing.T, name, ns string, addrs []string, mut func(*lbv1alpha1.IPAddressPool)) *lbv1alpha1.IPAddressPool {
	t.Helper()
	p := &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: addrs}}
	if ns != "" {
		p.Spec.ServiceAllocation = &lbv1alpha1.ServiceAllocation{Namespaces: []string{ns}}
	}
	if mut != nil {
		mut(p)
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pool: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(t.Context()), p) })
	return p
}

func newL2(t *testing.T, name string) {
	t.Helper()
	a := &lbv1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(t.Context(), a); err != nil {
		t.Fatalf("creating L2Advertisement: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(t.Context()), a) })
}

// newService creates a selector-less LoadBalancer Service with an http
// (TCP 80 → 8080) and a dns (UDP 53 → 5353) port.
func newService(t *testing.T, ns, name string, mut func(*corev1.Service)) *corev1.Service {
	t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer,
		Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
		}}}
	if mut != nil {
		mut(s)
	}
	if err := env.Client.Create(t.Context(), s); err != nil {
		t.Fatalf("creating Service: %v", err)
	}
	return s
}

// endpoint is one backend address with its readiness.
type endpoint struct {
	ip          string
	ready       bool
	terminating bool
}

// setEndpoints creates or replaces the Service's EndpointSlice.
func setEndpoints(t *testing.T, ns, svc string, eps ...endpoint) {
	t.Helper()
	var out []discoveryv1.Endpoint
	for _, e := range eps {
		out = append(out, discoveryv1.Endpoint{Addresses: []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Terminating: ptr.To(e.terminating)}})
	}
	setSlice(t, ns, svc, out)
}

// setSlice creates or replaces the Service's EndpointSlice with these
// endpoints.
func setSlice(t *testing.T, ns, svc string, eps []discoveryv1.Endpoint) {
	t.Helper()
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-manual",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "lbagent-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))},
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(5353))},
		}}
	es.Endpoints = eps
	cur := &discoveryv1.EndpointSlice{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(es), cur); err == nil {
		cur.Endpoints, cur.Ports = es.Endpoints, es.Ports
		if err := env.Client.Update(t.Context(), cur); err != nil {
			t.Fatalf("updating EndpointSlice: %v", err)
		}
		return
	}
	if err := env.Client.Create(t.Context(), es); err != nil {
		t.Fatalf("creating EndpointSlice: %v", err)
	}
}

// ready returns the LoadBalancerReady condition and ingress IP.
func ready(ctx context.Context, ns, name string) (*metav1.Condition, string, error) {
	s := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		return nil, "", err
	}
	ip := ""
	if len(s.Status.LoadBalancer.Ingress) > 0 {
		ip = s.Status.LoadBalancer.Ingress[0].IP
	}
	c := meta.FindStatusCondition(s.Status.Conditions, lbv1alpha1.LoadBalancerReadyCondition)
	if c == nil {
		return nil, ip, fmt.Errorf("no %s condition yet", lbv1alpha1.LoadBalancerReadyCondition)
	}
	return c, ip, nil
}

// waitReason waits for LoadBalancerReady to carry reason and returns it.
func waitReason(t *testing.T, ns, name, reason string) *metav1.Condition {
	t.Helper()
	g := NewWithT(t)
	var got *metav1.Condition
	g.Eventually(func(g Gomega) {
		c, _, err := ready(t.Context(), ns, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		got = c
	}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	return got
}

// assignedAddress returns the Service's address from pool status.
func assignedAddress(ctx context.Context, pool, ns, name string) string {
	p := &lbv1alpha1.IPAddressPool{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: pool}, p); err != nil {
		return ""
	}
	for _, a := range p.Status.Assignments {
		if a.Service.Namespace == ns && a.Service.Name == name {
			return a.Address
		}
	}
	return ""
}

func agentSpec(topo *lbtest.Topology, i int, leaseNS string) lbtest.AgentSpec {
	return lbtest.AgentSpec{Kubeconfig: env.KubeconfigPath, NodeName: fmt.Sprintf("node-%c", 'a'+i), NetNS: topo.Nodes[i],
		Interface: "eth0", LeaseNamespace: leaseNS, ProbeInterval: 2 * time.Second}
}

// announcedBy waits for an AddressAnnounced Event on the Service whose
// note contains want.
func announcedBy(t *testing.T, ns, svc, want string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(env.Client.List(t.Context(), &list, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Kind == "Service" && e.Regarding.Name == svc && e.Reason == lbagent.AnnouncedReason {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ContainElement(ContainSubstring(want)))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
