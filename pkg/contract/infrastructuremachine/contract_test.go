package infrastructuremachine

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func obj(gen int64, spec, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec, "status": status}}
	u.SetGeneration(gen)
	return u
}

func TestRead(t *testing.T) {
	g := NewWithT(t)
	s, err := Read(obj(2, map[string]any{"providerID": "kwok://a/b"}, map[string]any{
		"provisioned": true, "powerState": "On", "bootDevice": "Disk", "observedGeneration": int64(2),
		"addresses":  []any{map[string]any{"type": "InternalIP", "address": "10.0.0.2"}},
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "PoweredOn"}},
	}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Provisioned).To(BeTrue())
	g.Expect(s.Stale).To(BeFalse())
	g.Expect(s.Addresses).To(Equal([]Address{{Type: "InternalIP", Address: "10.0.0.2"}}))
	g.Expect(s.Ready.Reason).To(Equal("PoweredOn"))

	s, err = Read(obj(3, map[string]any{}, map[string]any{"observedGeneration": int64(2)}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Stale).To(BeTrue())

	_, err = Read(obj(1, map[string]any{}, map[string]any{"provisioned": true}))
	g.Expect(IsViolation(err)).To(BeTrue())
	g.Expect(err.Error()).To(ContainSubstring("spec.providerID"))
	g.Expect(err.Error()).To(ContainSubstring("status.powerState"))

	_, err = Read(obj(1, map[string]any{}, map[string]any{"powerState": "Sleeping"}))
	g.Expect(IsViolation(err)).To(BeTrue())
	_, err = Read(obj(1, map[string]any{}, map[string]any{"provisioned": "yes"}))
	g.Expect(IsViolation(err)).To(BeTrue())
}

func TestSpecPatchAndMatches(t *testing.T) {
	g := NewWithT(t)
	d := Desired{PowerState: "On", BootDevice: "Network", BootOnce: true, Image: "img",
		NetworkInterfaces: []NetworkInterface{{Name: "eth0", Network: "lan", MACAddress: "02:00:00:00:00:01"}}}
	u := obj(1, map[string]any{}, nil)
	g.Expect(SpecMatches(u, d)).To(BeFalse())
	u.Object["spec"] = SpecPatch(d)["spec"]
	g.Expect(SpecMatches(u, d)).To(BeTrue())
	d.NetworkInterfaces[0].MACAddress = "02:00:00:00:00:02"
	g.Expect(SpecMatches(u, d)).To(BeFalse())
	d.NetworkInterfaces = nil
	g.Expect(SpecMatches(u, d)).To(BeTrue(), "nil NICs leave the provider's NICs alone")
	g.Expect(SpecPatch(d)["spec"]).NotTo(HaveKey("networkInterfaces"))
}

func TestValidMAC(t *testing.T) {
	g := NewWithT(t)
	g.Expect(ValidMAC("02:00:00:00:00:01")).To(BeEmpty())
	g.Expect(ValidMAC("52:54:00:12:34:56")).To(BeEmpty())
	g.Expect(ValidMAC("01:00:5e:00:00:01")).To(ContainSubstring("unicast"))
	g.Expect(ValidMAC("ff:ff:ff:ff:ff:ff")).To(ContainSubstring("unicast"))
	g.Expect(ValidMAC("00:00:00:00:00:00")).To(ContainSubstring("zeroes"))
	g.Expect(ValidMAC("02-00-00-00-00-01")).To(ContainSubstring("colons"))
	g.Expect(ValidMAC("02:00:00:00:00:0A")).To(ContainSubstring("lowercase"))
}
