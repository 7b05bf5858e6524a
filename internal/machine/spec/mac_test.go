package spec

import (
	"testing"

	. "github.com/onsi/gomega"

	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
)

func TestGenerateMAC(t *testing.T) {
	g := NewWithT(t)
	a := GenerateMAC("ns", "m", "eth0")
	g.Expect(GenerateMAC("ns", "m", "eth0")).To(Equal(a), "stable")
	g.Expect(contract.ValidMAC(a)).To(BeEmpty(), "a valid unicast MAC")
	g.Expect(a[1:2]).To(BeElementOf("2", "6", "a", "e"), "locally administered, unicast")
	seen := map[string]bool{a: true}
	for _, in := range [][3]string{{"ns", "m", "eth1"}, {"ns", "n", "eth0"}, {"other", "m", "eth0"}, {"ns/m", "", "eth0"}} {
		mac := GenerateMAC(in[0], in[1], in[2])
		g.Expect(seen).NotTo(HaveKey(mac), "%v", in)
		seen[mac] = true
	}
}
