package machine_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

const wait = 60 * time.Second

func kwokPair(t *testing.T, ns, name string, mut func(*machinev1alpha1.Machine)) *machinev1alpha1.Machine {
	t.Helper()
	g := NewWithT(t)
	km := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	g.Expect(env.Client.Create(t.Context(), km)).To(Succeed())
	m := &machinev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: machinev1alpha1.MachineSpec{
			InfrastructureRef: machinev1alpha1.InfrastructureReference{
				APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: name,
			},
		},
	}
	if mut != nil {
		mut(m)
	}
	g.Expect(env.Client.Create(t.Context(), m)).To(Succeed())
	return m
}

// waitMachine waits until check passes on a fresh read of m.
func waitMachine(t *testing.T, m *machinev1alpha1.Machine, check func(g Gomega, m *machinev1alpha1.Machine)) *machinev1alpha1.Machine {
	t.Helper()
	out := &machinev1alpha1.Machine{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), out)).To(Succeed())
		check(g, out)
		// Whatever state the test waits for, kstatus reads it as the
		// conditions mean it.
		testenv.ExpectKstatusAgrees(t.Context(), g, env.Client, out)
	}).WithTimeout(wait).WithPolling(100 * time.Millisecond).Should(Succeed())
	return out
}

func setPower(t *testing.T, m *machinev1alpha1.Machine, p machinev1alpha1.PowerState) {
	t.Helper()
	cur := &machinev1alpha1.Machine{}
	NewWithT(t).Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), cur)).To(Succeed())
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.PowerState = p
	NewWithT(t).Expect(env.Client.Patch(t.Context(), cur, patch)).To(Succeed())
}
