package machine_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// Bad specs are refused naming the field, or reported with a reason.
func TestBadSpecs(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	ref := func(kind, name string) machinev1alpha1.InfrastructureReference {
		return machinev1alpha1.InfrastructureReference{APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: kind, Name: name}
	}

	t.Run("MulticastMACRefused", func(t *testing.T) {
		m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "multicast"},
			Spec: machinev1alpha1.MachineSpec{InfrastructureRef: ref("KwokMachine", "x"),
				NetworkInterfaces: []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: "lan", MACAddress: "01:00:5e:00:00:01"}}}}
		err := env.Client.Create(t.Context(), m)
		NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		NewWithT(t).Expect(err.Error()).To(ContainSubstring("spec.networkInterfaces[0].macAddress"))
		NewWithT(t).Expect(err.Error()).To(ContainSubstring("unicast"))
	})

	t.Run("InfrastructureRefImmutable", func(t *testing.T) {
		m := kwokPair(t, ns, "immutable", nil)
		cur := &machinev1alpha1.Machine{}
		NewWithT(t).Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), cur)).To(Succeed())
		patch := client.MergeFrom(cur.DeepCopy()) // no resourceVersion: the controller writes too
		cur.Spec.InfrastructureRef.Name = "other"
		err := env.Client.Patch(t.Context(), cur, patch)
		NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		NewWithT(t).Expect(err.Error()).To(ContainSubstring("spec.infrastructureRef"))
	})

	t.Run("UnknownKind", func(t *testing.T) {
		// Refused at admission, naming the field.
		m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unknown"},
			Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
				APIVersion: "nowhere.example.test/v1", Kind: "NoSuchMachine", Name: "x"}}}
		err := env.Client.Create(t.Context(), m.DeepCopy())
		NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		NewWithT(t).Expect(err.Error()).To(ContainSubstring("spec.infrastructureRef.kind"))
		NewWithT(t).Expect(err.Error()).To(ContainSubstring("contract.converge.dev/infrastructure-machine=v1alpha1"))
		// Stored around the webhook: Stalled, with the reason.
		env.SkipValidationForLabelled(t)
		m.Labels = map[string]string{testenv.NoValidationLabel: "true"}
		NewWithT(t).Eventually(func() error { return env.Client.Create(t.Context(), m.DeepCopy()) }).WithTimeout(wait).Should(Succeed())
		waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
			c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.InfrastructureContractNotDeclaredReason)
			g.Expect(c.Message).To(ContainSubstring("spec.infrastructureRef.kind"))
			g.Expect(c.Message).To(ContainSubstring("NoSuchMachine"))
			testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.StalledCondition, metav1.ConditionTrue, machinev1alpha1.InfrastructureContractNotDeclaredReason)
			g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseFailed))
		})
	})

	t.Run("InfrastructureNotFound", func(t *testing.T) {
		m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "missing"},
			Spec: machinev1alpha1.MachineSpec{InfrastructureRef: ref("KwokMachine", "missing")}}
		NewWithT(t).Expect(env.Client.Create(t.Context(), m)).To(Succeed())
		waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
			testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.InfrastructureReadyCondition, metav1.ConditionFalse, machinev1alpha1.InfrastructureNotFoundReason)
			g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhasePending))
		})
	})

	t.Run("OwnedByOther", func(t *testing.T) {
		first := kwokPair(t, ns, "shared", nil)
		waitMachine(t, first, func(g Gomega, m *machinev1alpha1.Machine) {
			g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		})
		second := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "thief"},
			Spec: machinev1alpha1.MachineSpec{InfrastructureRef: ref("KwokMachine", "shared"), PowerState: machinev1alpha1.PowerOff}}
		NewWithT(t).Expect(env.Client.Create(t.Context(), second)).To(Succeed())
		waitMachine(t, second, func(g Gomega, m *machinev1alpha1.Machine) {
			c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.InfrastructureOwnedByOtherReason)
			g.Expect(c.Message).To(ContainSubstring("Machine shared"))
		})
		km := &infrastructurev1alpha1.KwokMachine{}
		NewWithT(t).Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "shared"}, km)).To(Succeed())
		NewWithT(t).Expect(km.Spec.PowerState).To(Equal(machinev1alpha1.PowerOn), "the second Machine never wrote to it")
	})

	t.Run("DuplicateMAC", func(t *testing.T) {
		mac := "02:aa:bb:cc:dd:01"
		nic := func(m *machinev1alpha1.Machine) {
			m.Spec.NetworkInterfaces = []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: "lan", MACAddress: mac}}
		}
		first := kwokPair(t, ns, "mac-first", nic)
		waitMachine(t, first, func(g Gomega, m *machinev1alpha1.Machine) {
			g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		})
		// The older Machine keeps the MAC; creation timestamps have
		// one-second resolution and a tie goes to the lower UID, so let
		// the clock pass the first one's second before the second exists.
		time.Sleep(time.Until(first.CreationTimestamp.Add(1100 * time.Millisecond)))
		// Another tenant's namespace: a MAC is unique on the wire.
		other := env.NewNamespace(t)
		second := kwokPair(t, other, "mac-second", nic)
		waitMachine(t, second, func(g Gomega, m *machinev1alpha1.Machine) {
			c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.DuplicateMACAddressReason)
			g.Expect(c.Message).To(ContainSubstring("another Machine"), "another namespace's Machine is not named")
			g.Expect(c.Message).NotTo(ContainSubstring("mac-first"))
			g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseFailed))
		})
		km := &infrastructurev1alpha1.KwokMachine{}
		NewWithT(t).Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: other, Name: "mac-second"}, km)).To(Succeed())
		NewWithT(t).Expect(km.Spec.NetworkInterfaces).To(BeEmpty(), "the duplicate MAC never reached the provider")
		// The first one is deleted: the second gets its MAC.
		NewWithT(t).Expect(env.Client.Delete(t.Context(), first)).To(Succeed())
		waitMachine(t, second, func(g Gomega, m *machinev1alpha1.Machine) {
			g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		})
	})

	t.Run("Paused", func(t *testing.T) {
		m := kwokPair(t, ns, "paused", func(m *machinev1alpha1.Machine) { m.Spec.Paused = true })
		waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
			testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.PausedReason)
		})
		km := &infrastructurev1alpha1.KwokMachine{}
		NewWithT(t).Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "paused"}, km)).To(Succeed())
		NewWithT(t).Expect(km.OwnerReferences).To(BeEmpty(), "a paused Machine does not touch its provider object")
	})
}
