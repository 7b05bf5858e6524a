package dhcpagentdeployment_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/dhcpagentdeployment"
	"github.com/converge-dev/converge/internal/testenv"
)

func pool(ns, name, network, prefix string) *dhcpv1alpha1.IPPool {
	return &dhcpv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: dhcpv1alpha1.IPPoolSpec{NetworkName: network, IPv4Config: dhcpv1alpha1.IPv4Config{
			CIDR: prefix + ".0/24", ServerIP: prefix + ".2", Router: prefix + ".1",
			Pool: dhcpv1alpha1.AddressRange{Start: prefix + ".100", End: prefix + ".120"},
		}},
	}
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func deployment(ctx context.Context, g Gomega, network string) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: agentNamespace, Name: dhcpagentdeployment.DeploymentName(network)}, d)).To(Succeed())
	return d
}

func gone(ctx context.Context, g Gomega, network string) {
	err := env.Client.Get(ctx, types.NamespacedName{Namespace: agentNamespace, Name: dhcpagentdeployment.DeploymentName(network)}, &appsv1.Deployment{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Deployment of network %s still exists (%v)", network, err)
}

// One Deployment per network, with the agent's arguments, ServiceAccount
// and attachment; it follows the pools' attachment annotation, is restored
// after someone edits or deletes it, and goes with the network's last
// pool. The in-manager agent stays off in cluster mode.
func TestDeploymentPerNetwork(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ensureNamespace(t, agentNamespace)
	ns1, ns2 := env.NewNamespace(t), env.NewNamespace(t)
	g.Expect(env.Client.Create(ctx, pool(ns1, "a", "dpa", "10.91.0"))).To(Succeed())
	g.Expect(env.Client.Create(ctx, pool(ns2, "b", "dpa", "10.91.1"))).To(Succeed())
	g.Expect(env.Client.Create(ctx, pool(ns1, "c", "dpb", "10.91.2"))).To(Succeed())

	for _, network := range []string{"dpa", "dpb"} {
		testenv.Eventually(g, func(g Gomega) {
			d := deployment(ctx, g, network)
			g.Expect(d.Labels).To(HaveKeyWithValue(dhcpagentdeployment.NetworkLabel, network))
			g.Expect(d.Spec.Replicas).To(Equal(ptr.To(int32(1))))
			g.Expect(d.Spec.Strategy.Type).To(Equal(appsv1.RecreateDeploymentStrategyType))
			pod := d.Spec.Template
			g.Expect(pod.Annotations).To(HaveKeyWithValue(dhcpagentdeployment.NetworksAnnotation, network+"-nad@net1"))
			g.Expect(pod.Spec.ServiceAccountName).To(Equal("dhcp-agents"))
			g.Expect(pod.Spec.Containers).To(HaveLen(1))
			c := pod.Spec.Containers[0]
			g.Expect(c.Image).To(Equal("registry.example/converge:test"))
			g.Expect(c.Args).To(ContainElements("agent", "dhcp", "--network="+network, "--interface=net1", "--lease-namespace="+agentNamespace))
			g.Expect(c.SecurityContext.Capabilities.Add).To(ConsistOf(corev1.Capability("NET_ADMIN"), corev1.Capability("NET_RAW"), corev1.Capability("NET_BIND_SERVICE")))
		}).Should(Succeed())
	}

	// A pool's annotation names the attachment.
	p := &dhcpv1alpha1.IPPool{}
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns2, Name: "b"}, p)).To(Succeed())
	base := p.DeepCopy()
	p.Annotations = map[string]string{dhcpagentdeployment.AttachmentAnnotation: "infra/lan-bridge@dhcp0"}
	g.Expect(env.Client.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		d := deployment(ctx, g, "dpa")
		g.Expect(d.Spec.Template.Annotations).To(HaveKeyWithValue(dhcpagentdeployment.NetworksAnnotation, "infra/lan-bridge@dhcp0"))
	}).Should(Succeed())

	// Someone scales it: it comes back to one replica. Someone deletes
	// it: it comes back.
	d := deployment(ctx, g, "dpa")
	base2 := d.DeepCopy()
	d.Spec.Replicas = ptr.To(int32(3))
	g.Expect(env.Client.Patch(ctx, d, client.MergeFrom(base2))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(deployment(ctx, g, "dpa").Spec.Replicas).To(Equal(ptr.To(int32(1))))
	}).Should(Succeed())
	uid := d.UID
	g.Expect(env.Client.Delete(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(deployment(ctx, g, "dpa").UID).NotTo(Equal(uid))
	}).Should(Succeed())

	// The in-manager agent is off: no pool got an AgentReady condition.
	g.Consistently(func(g Gomega) {
		for _, k := range []types.NamespacedName{{Namespace: ns1, Name: "a"}, {Namespace: ns2, Name: "b"}} {
			p := &dhcpv1alpha1.IPPool{}
			g.Expect(env.Client.Get(ctx, k, p)).To(Succeed())
			g.Expect(p.Status.Conditions).NotTo(ContainElement(HaveField("Type", dhcpv1alpha1.AgentReadyCondition)))
		}
	}).WithTimeout(time.Second).Should(Succeed())

	// The network keeps its Deployment while it has a pool; it goes with
	// the last, and the other network's stays.
	g.Expect(env.Client.Delete(ctx, pool(ns1, "a", "", ""))).To(Succeed())
	g.Consistently(func(g Gomega) { deployment(ctx, g, "dpa") }).WithTimeout(time.Second).Should(Succeed())
	g.Expect(env.Client.Delete(ctx, pool(ns2, "b", "", ""))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) { gone(ctx, g, "dpa") }).Should(Succeed())
	deployment(ctx, g, "dpb")
	g.Expect(env.Client.Delete(ctx, pool(ns1, "c", "", ""))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) { gone(ctx, g, "dpb") }).Should(Succeed())
}
