package machine

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
)

func machine() *machinev1alpha1.Machine {
	return &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: "infrastructure.converge.dev/v1alpha1", Kind: "KwokMachine", Name: "m"}}}
}

func TestDefault(t *testing.T) {
	g := NewWithT(t)
	m := machine()
	m.Spec.NetworkInterfaces = []machinev1alpha1.NetworkInterface{{Name: "eth0", Network: "lan"}, {Name: "eth1", Network: "lan", MACAddress: "02:00:00:00:00:09"}}
	g.Expect(Machine{}.Default(t.Context(), m)).To(Succeed())
	g.Expect(m.Spec.PowerState).To(Equal(machinev1alpha1.PowerOn))
	g.Expect(m.Spec.BootDevice).To(Equal(machinev1alpha1.BootDisk))
	g.Expect(m.Spec.NetworkInterfaces[0].MACAddress).To(Equal(machinespec.GenerateMAC("ns", "m", "eth0")))
	g.Expect(m.Spec.NetworkInterfaces[1].MACAddress).To(Equal("02:00:00:00:00:09"), "a given MAC is kept")
}

func TestValidate(t *testing.T) {
	g := NewWithT(t)
	m := machine()
	m.Spec.NetworkInterfaces = []machinev1alpha1.NetworkInterface{
		{Name: "eth0", Network: "lan", MACAddress: "02:00:00:00:00:01"},
		{Name: "eth1", Network: "lan", MACAddress: "02:00:00:00:00:01"},
		{Name: "eth2", Network: "lan", MACAddress: "03:00:00:00:00:01"},
	}
	_, err := Machine{}.ValidateCreate(t.Context(), m)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("spec.networkInterfaces[1].macAddress: Duplicate value"))
	g.Expect(err.Error()).To(ContainSubstring("spec.networkInterfaces[2].macAddress"))
	g.Expect(err.Error()).To(ContainSubstring("unicast"))

	old, cur := machine(), machine()
	cur.Spec.InfrastructureRef.Name = "other"
	_, err = Machine{}.ValidateUpdate(t.Context(), old, cur)
	g.Expect(err).To(MatchError(ContainSubstring("spec.infrastructureRef: Invalid value")))
	cur = machine()
	cur.Annotations = map[string]string{"x": "y"}
	_, err = Machine{}.ValidateUpdate(t.Context(), old, cur)
	g.Expect(err).NotTo(HaveOccurred(), "metadata-only changes pass")
}

// spec.providerID: empty or the object's own, nothing else.
func TestValidateProviderID(t *testing.T) {
	g := NewWithT(t)
	gk := machinev1alpha1.GroupVersion.WithKind("KwokMachine").GroupKind()
	g.Expect(ValidateProviderID(gk, "m", "", "kwok://ns/m")).To(Succeed())
	g.Expect(ValidateProviderID(gk, "m", "kwok://ns/m", "kwok://ns/m")).To(Succeed())
	err := ValidateProviderID(gk, "m", "kwok://victim/m", "kwok://ns/m")
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("spec.providerID"))
}

// An update that leaves a stored providerID as it is passes, even one no
// longer allowed (finalizer and status work must never be refused for it);
// a change is checked: to another object's ID refused, to its own allowed.
func TestProviderIDUpdate(t *testing.T) {
	g := NewWithT(t)
	v := providerIDValidator[*infrastructurev1alpha1.KwokMachine]{
		kind: infrastructurev1alpha1.GroupVersion.WithKind("KwokMachine").GroupKind(),
		got:  func(km *infrastructurev1alpha1.KwokMachine) string { return km.Spec.ProviderID },
		own:  machinespec.KwokProviderID,
	}
	km := func(id string) *infrastructurev1alpha1.KwokMachine {
		return &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "m"},
			Spec: infrastructurev1alpha1.KwokMachineSpec{MachineSpecFields: infrastructurev1alpha1.MachineSpecFields{ProviderID: id}}}
	}
	other := machinespec.KwokProviderIDPrefix + "b/victim"
	_, err := v.ValidateUpdate(t.Context(), km(other), km(other))
	g.Expect(err).NotTo(HaveOccurred(), "an unchanged stored providerID")
	_, err = v.ValidateUpdate(t.Context(), km(""), km(other))
	g.Expect(err).To(HaveOccurred(), "a change to another object's providerID")
	g.Expect(err.Error()).To(ContainSubstring("spec.providerID"))
	_, err = v.ValidateUpdate(t.Context(), km(""), km(machinespec.KwokProviderIDPrefix+"a/m"))
	g.Expect(err).NotTo(HaveOccurred(), "a change to its own providerID")
	_, err = v.ValidateCreate(t.Context(), km(other))
	g.Expect(err).To(HaveOccurred(), "created with another object's providerID")
}
