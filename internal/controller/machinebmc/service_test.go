package machinebmc_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/lbipam"
	"github.com/converge-dev/converge/internal/controller/machinebmc"
	"github.com/converge-dev/converge/internal/lbtest"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/testpeer"
)

// A manager in cluster mode (--bmc-expose=Service) publishes a BMC
// through a LoadBalancer Service whose EndpointSlice names the BMC
// server's address, and a client outside the cluster reaches the BMC at
// the load balancer's address: Converge's own load balancer (lbipam and an
// lbagent on a node namespace) carries ipmitool's and redfishtool's
// packets to the BMC, which listens in a backend namespace as a manager
// Pod would on its Pod IP. Ready needs the controller's probe through that
// address. Before an address is assigned the BMC is ServicePending; a
// foreign Service of the name is ServiceConflict and left as it is.
func TestPublishedThroughALoadBalancer(t *testing.T) {
	testenv.Need(t, env)
	lbtest.NeedNetwork(t)
	testpeer.NeedTool(t, "ipmitool", "ipmitool")
	testpeer.NeedTool(t, "redfishtool", "redfishtool")
	g := NewWithT(t)
	ctx := t.Context()
	topo, err := lbtest.New(ctx, 1, 1)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(topo.Close)
	ns := env.NewNamespace(t)

	shard := "bmc-service"
	labels := map[string]string{setup.ShardLabel: shard}
	env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{machinebmc.ControllerName}
		o.ShardKey = shard
		o.BMC = setup.BMCOptions{BindAddress: topo.BackendIPs[0].String(), Netns: topo.Backends[0], Expose: string(machinebmc.ExposeService)}
	})

	g.Expect(env.Client.Create(ctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Labels: labels},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: "m"}}})).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
		StringData: map[string]string{"username": "admin", "password": "s3cret-bmc"}})).To(Succeed())
	newServedBMC := func(name string) *bmcv1alpha1.MachineBMC {
		b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: bmcv1alpha1.MachineBMCSpec{
			MachineRef: bmcv1alpha1.LocalObjectReference{Name: "m"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "m"},
			Service: bmcv1alpha1.ServiceSpec{Type: bmcv1alpha1.ServiceLoadBalancer}}}
		g.Expect(env.Client.Create(ctx, b)).To(Succeed())
		return b
	}

	// No load balancer yet: published, pending, and nothing published in
	// the status that a client could use.
	b := newServedBMC("m")
	b = waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionFalse, bmcv1alpha1.ServicePendingReason)
	})
	g.Expect(b.Status.IPMIEndpoint).To(BeEmpty())
	g.Expect(readyMessage(b)).To(ContainSubstring("no load-balancer address"))
	svcName := machinebmc.ServiceName("m")
	svc := &corev1.Service{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: svcName}, svc)).To(Succeed())
	g.Expect(metav1.IsControlledBy(svc, b)).To(BeTrue(), "the Service is the MachineBMC's")
	g.Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeLoadBalancer))
	g.Expect(svc.Spec.Selector).To(BeEmpty())
	ports := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p
	}
	g.Expect(ports).To(HaveKey("ipmi"))
	g.Expect(ports).To(HaveKey("redfish"))
	g.Expect(ports["ipmi"].Protocol).To(Equal(corev1.ProtocolUDP))
	g.Expect(ports["ipmi"].Port).To(Equal(int32(623)))
	g.Expect(ports["redfish"].Port).To(Equal(int32(443)))
	slice := &discoveryv1.EndpointSlice{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: svcName}, slice)).To(Succeed())
	g.Expect(slice.Labels).To(HaveKeyWithValue(discoveryv1.LabelServiceName, svcName))
	g.Expect(slice.Endpoints).To(HaveLen(1))
	g.Expect(slice.Endpoints[0].Addresses).To(Equal([]string{topo.BackendIPs[0].String()}))
	for _, p := range slice.Ports {
		g.Expect(ports).To(HaveKey(*p.Name))
		g.Expect(ports[*p.Name].TargetPort).To(Equal(intstr.FromInt32(*p.Port)), "the Service targets the port the BMC listens on")
	}

	// The load balancer: a pool for this namespace, an L2 advertisement
	// and an agent announcing from the node namespace.
	env.StartManager(t, func(o *setup.Options) { o.Controllers = []string{lbipam.ControllerName} })
	pool := &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: lbv1alpha1.IPAddressPoolSpec{
		Addresses: []string{lbtest.PoolRange}, ServiceAllocation: &lbv1alpha1.ServiceAllocation{Namespaces: []string{ns}}}}
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), pool) })
	l2 := &lbv1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	g.Expect(env.Client.Create(ctx, l2)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), l2) })
	agent, err := topo.StartAgent(lbtest.AgentSpec{Kubeconfig: env.KubeconfigPath, NodeName: "node-a", NetNS: topo.Nodes[0],
		Interface: "eth0", LeaseNamespace: ns, ProbeInterval: 2 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(agent.Stop)

	b = waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
	})
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	g.Expect(svc.Status.LoadBalancer.Ingress).NotTo(BeEmpty())
	vip := svc.Status.LoadBalancer.Ingress[0].IP
	g.Expect(b.Status.IPMIEndpoint).To(Equal(net.JoinHostPort(vip, "623")))
	g.Expect(b.Status.RedfishEndpoint).To(Equal("https://" + net.JoinHostPort(vip, "443")))

	// A client on the outside network: ipmitool powers the Machine off
	// through the load balancer, redfishtool reads the system.
	out, err := netns.Run(ctx, topo.Client, "ipmitool", "-I", "lanplus", "-C", "17", "-H", vip, "-p", "623",
		"-U", "admin", "-P", "s3cret-bmc", "-R", "3", "-N", "2", "chassis", "power", "off")
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m"}, m)).To(Succeed())
	g.Expect(m.Spec.PowerState).To(Equal(machinev1alpha1.PowerOff))
	out, err = netns.Run(ctx, topo.Client, "redfishtool", "-r", vip+":443", "-u", "admin", "-p", "s3cret-bmc", "-S", "Always", "-T", "10", "Systems", "get")
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring(`"PowerState"`))
	// The certificate names the load balancer's address and verifies with
	// the published CA bundle: curl --cacert, no -k.
	bundle := filepath.Join(t.TempDir(), "bmc-ca.pem")
	g.Expect(os.WriteFile(bundle, []byte(b.Status.RedfishCABundle), 0o600)).To(Succeed())
	out, err = netns.Run(ctx, topo.Client, "curl", "-sS", "--fail", "--cacert", bundle, "-u", "admin:s3cret-bmc", b.Status.RedfishEndpoint+"/redfish/v1/Systems")
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring(`"Members@odata.count":1`))
	out, err = netns.Run(ctx, topo.Client, "ipmitool", "-I", "lanplus", "-C", "17", "-H", vip, "-p", "623",
		"-U", "admin", "-P", "wrong", "-R", "1", "-N", "2", "chassis", "power", "status")
	g.Expect(err).To(HaveOccurred(), "a wrong password is refused through the load balancer too: %s", out)

	// A Service of the name that is not a MachineBMC's is not adopted.
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: machinebmc.ServiceName("other")}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	g.Expect(env.Client.Create(ctx, foreign)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), foreign)).To(Succeed())
	other := newServedBMC("other")
	other = waitBMC(t, other, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionFalse, bmcv1alpha1.ServiceConflictReason)
	})
	g.Expect(readyMessage(other)).To(ContainSubstring("is not adopted"))
	after := &corev1.Service{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(foreign.ResourceVersion), "the foreign Service was written to")
	g.Expect(apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: machinebmc.ServiceName("other")}, &discoveryv1.EndpointSlice{}))).
		To(BeTrue(), "an EndpointSlice was added to a foreign Service")

	// Deleting the MachineBMC: the BMC stops answering at the load
	// balancer's address; its Service and EndpointSlice are owned by it
	// (controller references, so the garbage collector takes them; this
	// suite runs no kube-controller-manager).
	g.Expect(metav1.IsControlledBy(slice, b)).To(BeTrue(), "the EndpointSlice is the MachineBMC's")
	for _, o := range append(svc.OwnerReferences, slice.OwnerReferences...) {
		g.Expect(o.BlockOwnerDeletion).To(HaveValue(BeTrue()))
	}
	g.Expect(env.Client.Delete(ctx, b)).To(Succeed())
	g.Eventually(func() error {
		_, err := netns.Run(ctx, topo.Client, "ipmitool", "-I", "lanplus", "-C", "17", "-H", vip, "-p", "623",
			"-U", "admin", "-P", "s3cret-bmc", "-R", "1", "-N", "1", "chassis", "power", "status")
		return err
	}).WithTimeout(wait).Should(HaveOccurred(), "the deleted MachineBMC still answers")
}

// readyMessage is the Ready condition's message.
func readyMessage(b *bmcv1alpha1.MachineBMC) string {
	if c := meta.FindStatusCondition(b.Status.Conditions, bmcv1alpha1.ReadyCondition); c != nil {
		return c.Message
	}
	return ""
}

func TestServiceName(t *testing.T) {
	g := NewWithT(t)
	g.Expect(machinebmc.ServiceName("node-1")).To(Equal("bmc-node-1"))
	long := machinebmc.ServiceName(strings.Repeat("a", 70))
	g.Expect(long).To(HavePrefix("bmc-"))
	g.Expect(len(long)).To(BeNumerically("<=", 63))
	g.Expect(machinebmc.ServiceName("a.b")).NotTo(Equal(machinebmc.ServiceName("a-b")))
	g.Expect(machinebmc.ServiceName("a.b")).NotTo(ContainSubstring("."))
}
