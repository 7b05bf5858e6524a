package machine_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

func annotate(t *testing.T, m *machinev1alpha1.Machine, key string, value *string) {
	t.Helper()
	cur := &machinev1alpha1.Machine{}
	g := NewWithT(t)
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), cur)).To(Succeed())
	patch := client.MergeFrom(cur.DeepCopy())
	ann := cur.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	if value == nil {
		delete(ann, key)
	} else {
		ann[key] = *value
	}
	cur.SetAnnotations(ann)
	g.Expect(env.Client.Patch(t.Context(), cur, patch)).To(Succeed())
}

func gone(t *testing.T, obj client.Object) {
	t.Helper()
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj))
	}).WithTimeout(wait).WithPolling(100*time.Millisecond).Should(BeTrue(), "%T %s is gone", obj, obj.GetName())
}

// Deletion walks the hooks and the drain in order and says which one holds
// it: a pre-drain hook, a PodDisruptionBudget refusing an eviction, a
// pre-terminate hook; then the KwokMachine and its Node go, then the
// Machine.
func TestDeletionHooksAndDrain(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	hold := "test: holding"
	m := kwokPair(t, ns, "del", func(m *machinev1alpha1.Machine) {
		m.Annotations = map[string]string{
			machinev1alpha1.PreDrainHookPrefix + "backup":     hold,
			machinev1alpha1.PreTerminateHookPrefix + "detach": hold,
		}
	})
	m = waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		g.Expect(m.Status.NodeRef).NotTo(BeNil())
	})
	nodeName := m.Status.NodeRef.Name
	// Two Pods on the Node; a PDB forbids evicting the protected one.
	for _, name := range []string{"free", "protected"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		}
		g.Expect(env.Client.Create(t.Context(), pod)).To(Succeed())
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "protect"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "protected"}},
		},
	}
	g.Expect(env.Client.Create(t.Context(), pdb)).To(Succeed())
	g.Eventually(func(g Gomega) { // the disruption controller has looked at it
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(pdb), pdb)).To(Succeed())
		g.Expect(pdb.Status.ObservedGeneration).To(Equal(pdb.Generation))
		g.Expect(pdb.Status.CurrentHealthy).To(Equal(int32(1)))
	}).WithTimeout(wait).Should(Succeed())

	g.Expect(env.Client.Delete(t.Context(), m)).To(Succeed())
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseDeleting))
		c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.DeletingCondition, metav1.ConditionTrue, machinev1alpha1.WaitingForPreDrainHookReason)
		g.Expect(c.Message).To(ContainSubstring("backup (" + hold + ")"))
	})
	g.Consistently(func(g Gomega) { // nothing is evicted while the hook holds
		pods := &corev1.PodList{}
		g.Expect(env.Client.List(t.Context(), pods, client.InNamespace(ns))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(2))
	}).WithTimeout(time.Second).Should(Succeed())

	annotate(t, m, machinev1alpha1.PreDrainHookPrefix+"backup", nil)
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.DeletingCondition, metav1.ConditionTrue, machinev1alpha1.DrainingReason)
		g.Expect(c.Message).To(ContainSubstring("PodDisruptionBudget refuses the eviction of " + ns + "/protected"))
		g.Expect(m.Status.Deletion).NotTo(BeNil())
	})
	gone(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "free"}})
	node := &corev1.Node{}
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Name: nodeName}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeTrue(), "the Node is cordoned")
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "protected"}, &corev1.Pod{})).To(Succeed(), "the PDB holds the protected Pod")

	g.Expect(env.Client.Delete(t.Context(), pdb)).To(Succeed())
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.DeletingCondition, metav1.ConditionTrue, machinev1alpha1.WaitingForPreTerminateHookReason)
		g.Expect(c.Message).To(ContainSubstring("detach"))
	})
	gone(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "protected"}})
	km := &infrastructurev1alpha1.KwokMachine{}
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "del"}, km)).To(Succeed(), "the provider object waits for the pre-terminate hook")

	annotate(t, m, machinev1alpha1.PreTerminateHookPrefix+"detach", nil)
	gone(t, m)
	gone(t, km)
	gone(t, node)
}

// With the provider object held by a finalizer of someone else, the Machine
// says it waits for the infrastructure's deletion.
func TestDeletionWaitsForInfrastructure(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	m := kwokPair(t, ns, "held", nil)
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
	})
	km := &infrastructurev1alpha1.KwokMachine{}
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "held"}, km)).To(Succeed())
	patch := client.MergeFrom(km.DeepCopy())
	km.Finalizers = append(km.Finalizers, "example.com/hold")
	g.Expect(env.Client.Patch(t.Context(), km, patch)).To(Succeed())
	g.Expect(env.Client.Delete(t.Context(), m)).To(Succeed())
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.DeletingCondition, metav1.ConditionTrue, machinev1alpha1.WaitingForInfrastructureDeletionReason)
	})
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(km), km)).To(Succeed())
	// Release only the test's hold (the KwokMachine controller has already
	// done its cleanup and removed its own finalizer by now).
	patch = client.MergeFrom(km.DeepCopy())
	var kept []string
	for _, f := range km.Finalizers {
		if f != "example.com/hold" {
			kept = append(kept, f)
		}
	}
	km.Finalizers = kept
	g.Expect(env.Client.Patch(t.Context(), km, patch)).To(Succeed())
	gone(t, km)
	gone(t, m)
}

func ptr[T any](v T) *T { return &v }
