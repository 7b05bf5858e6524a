package machine

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
