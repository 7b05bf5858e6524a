package machine_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/kwokmachine"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
	"github.com/converge-dev/converge/pkg/contract/infrastructuremachine/conformance"
)

// A KwokMachine behind a Machine: Running with a Ready Node, then powered
// off (Node NotReady) and on again, with every status field bubbled up.
func TestKwokMachinePowerCycle(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	m := kwokPair(t, ns, "m1", func(m *machinev1alpha1.Machine) {
		m.Spec.NetworkInterfaces = []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: "lan"}}
	})
	mac := machinespec.GenerateMAC(ns, "m1", "eth0")
	got := waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionTrue, machinev1alpha1.RunningReason)
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.InfrastructureReadyCondition, metav1.ConditionTrue, machinev1alpha1.ProvisionedReason)
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.NodeHealthyCondition, metav1.ConditionTrue, machinev1alpha1.NodeReadyReason)
		g.Expect(m.Status.NodeRef).NotTo(BeNil())
		g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
	})
	g := NewWithT(t)
	g.Expect(got.Spec.NetworkInterfaces[0].MACAddress).To(Equal(mac), "the webhook wrote the stable generated MAC")
	g.Expect(got.Status.ProviderID).To(Equal("kwok://" + ns + "/m1"))
	g.Expect(got.Status.PowerState).To(Equal(machinev1alpha1.PowerOn))
	g.Expect(got.Status.Addresses).NotTo(BeEmpty())
	km := &infrastructurev1alpha1.KwokMachine{}
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "m1"}, km)).To(Succeed())
	g.Expect(metav1.IsControlledBy(km, got)).To(BeTrue(), "the Machine controls its provider object")
	g.Expect(km.Spec.NetworkInterfaces).To(HaveLen(1))
	g.Expect(km.Spec.NetworkInterfaces[0].MACAddress).To(Equal(mac), "the MAC reached the provider through the contract")
	g.Expect(km.Status.Conditions).To(ContainElement(HaveField("Reason", infrastructurev1alpha1.PoweredOnReason)))

	setPower(t, m, machinev1alpha1.PowerOff)
	got = waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhasePoweredOff))
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionTrue, machinev1alpha1.PoweredOffReason)
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.NodeHealthyCondition, metav1.ConditionFalse, machinev1alpha1.NodeNotReadyReason)
	})
	node := &corev1.Node{}
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Name: got.Status.NodeRef.Name}, node)).To(Succeed())
	g.Expect(node.Annotations).NotTo(HaveKey(kwokmachine.KwokNodeAnnotation), "kwok no longer serves the Node")
	g.Expect(node.Labels).To(HaveKeyWithValue(kwokmachine.TenantLabel, ns), "the Node names its tenant")
	g.Expect(node.Spec.Taints).To(ContainElement(kwokmachine.TenantTaint(ns)), "only the tenant's Pods land on it")
	g.Expect(node.Annotations).To(HaveKeyWithValue(infrastructuremachine.NodeOwnerAnnotation, ns+"/m1/"+string(km.UID)),
		"the Node names the provider object the Machine checks")
	g.Expect(got.Status.NodeRef.UID).To(Equal(node.UID))
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "m1"}, km)).To(Succeed())
	g.Expect(km.Status.Conditions).To(ContainElement(HaveField("Reason", infrastructurev1alpha1.PoweredOffReason)))

	setPower(t, m, machinev1alpha1.PowerOn)
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.NodeHealthyCondition, metav1.ConditionTrue, machinev1alpha1.NodeReadyReason)
	})
}

// While the provider has not answered, the Machine says Provisioning; and
// while the wanted power state is not reached, PowerTransition (caught by
// pausing the KwokMachine's progress: a KwokMachine whose Node name is
// taken never provisions).
func TestProvisioningAndNodeConflict(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	// A Node that is not ours holds the name the KwokMachine wants.
	squatter := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kwokmachine.NodeName(
		&infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}})}}
	g.Expect(env.Client.Create(t.Context(), squatter)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), squatter) })
	m := kwokPair(t, ns, "taken", nil)
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseProvisioning))
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.ProvisioningReason)
		c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.InfrastructureReadyCondition, metav1.ConditionFalse, machinev1alpha1.ProvisioningReason)
		g.Expect(c.Message).To(ContainSubstring(infrastructurev1alpha1.NodeConflictReason), "the provider's reason is bubbled up")
	})
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(squatter), squatter)).To(Succeed())
	g.Expect(squatter.Annotations).NotTo(HaveKey(kwokmachine.OwnerAnnotation), "a foreign Node is never adopted")
}

// KwokMachine passes the contract's conformance test.
func TestKwokMachineConformance(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	conformance.Run(t, conformance.Harness{
		Client: env.Client, Namespace: ns, GVK: infrastructurev1alpha1.GroupVersion.WithKind("KwokMachine"),
		New: func(t *testing.T, name string) {
			NewWithT(t).Expect(env.Client.Create(t.Context(), &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
		},
	})
}

// A KwokMachine's Node is tainted for its namespace: another namespace's Pod
// that does not tolerate it is never scheduled there, the tenant's own Pod
// that does is.
func TestKwokNodeKeepsOtherTenantsPodsOff(t *testing.T) {
	testenv.Need(t, env)
	ns, other := env.NewNamespace(t), env.NewNamespace(t)
	m := kwokPair(t, ns, "mine", nil)
	got := waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.NodeHealthyCondition, metav1.ConditionTrue, machinev1alpha1.NodeReadyReason)
	})
	node := got.Status.NodeRef.Name
	pod := func(ns, name string, tol []corev1.Toleration) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers:   []corev1.Container{{Name: "c", Image: "busybox"}}, Tolerations: tol}}
		NewWithT(t).Expect(env.Client.Create(t.Context(), p)).To(Succeed())
		return p
	}
	own := pod(ns, "own", []corev1.Toleration{{Key: kwokmachine.TenantLabel, Operator: corev1.TolerationOpEqual, Value: ns, Effect: corev1.TaintEffectNoSchedule}})
	foreign := pod(other, "foreign", nil)
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(own), own)).To(Succeed())
		g.Expect(own.Spec.NodeName).To(Equal(node), "the tenant's tolerating Pod is scheduled there")
	}).WithTimeout(wait).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(foreign), foreign)).To(Succeed())
		var c *corev1.PodCondition
		for i := range foreign.Status.Conditions {
			if foreign.Status.Conditions[i].Type == corev1.PodScheduled {
				c = &foreign.Status.Conditions[i]
			}
		}
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(corev1.PodReasonUnschedulable))
		g.Expect(c.Message).To(ContainSubstring("untolerated taint"))
	}).WithTimeout(wait).Should(Succeed())
	g.Expect(foreign.Spec.NodeName).To(BeEmpty(), "another namespace's Pod never lands on the tenant's Node")
}
