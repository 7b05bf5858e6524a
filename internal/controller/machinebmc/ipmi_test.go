package machinebmc_test

import (
	"os/exec"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/testpeer"
)

// ipmitool (cipher suites 3 and 17) and freeipmi's ipmipower drive a
// KwokMachine through its MachineBMC: every command is a write to the
// Machine's spec and an Event on it; power status is the Machine's status.
func TestIpmitoolDrivesTheMachine(t *testing.T) {
	testpeer.NeedTool(t, "ipmitool", "ipmitool")
	b, m := readyBMC(t, "ipmi")
	ep := b.Status.IPMIEndpoint
	g := NewWithT(t)
	g.Expect(ep).To(HavePrefix("127.0.0.1:"))

	g.Expect(mustIpmitool(t, ep, "3", "power", "status")).To(ContainSubstring("Chassis Power is on"))
	g.Expect(mustIpmitool(t, ep, "17", "mc", "info")).To(ContainSubstring("IPMI Version              : 2.0"))

	mustIpmitool(t, ep, "3", "power", "off")
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Spec.PowerState).To(Equal(machinev1alpha1.PowerOff))
		g.Expect(m.Status.PowerState).To(Equal(machinev1alpha1.PowerOff))
	})
	g.Expect(mustIpmitool(t, ep, "17", "power", "status")).To(ContainSubstring("Chassis Power is off"))
	g.Eventually(func(g Gomega) {
		g.Expect(machineEvents(g, t, m)).To(ContainSubstring("IPMI chassis power off from 127.0.0.1 as admin"))
	}).Should(Succeed())

	mustIpmitool(t, ep, "17", "power", "on")
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.PowerState).To(Equal(machinev1alpha1.PowerOn))
	})

	mustIpmitool(t, ep, "3", "chassis", "bootdev", "pxe")
	got := waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Spec.BootDevice).To(Equal(machinev1alpha1.BootNetwork))
	})
	g.Expect(got.Spec.BootOnce).To(BeTrue(), "bootdev without options=persistent is the next boot only")
	mustIpmitool(t, ep, "17", "chassis", "bootdev", "cdrom", "options=persistent,efiboot")
	got = waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Spec.BootDevice).To(Equal(machinev1alpha1.BootCDROM))
	})
	g.Expect(got.Spec.BootOnce).To(BeFalse())

	// power cycle: Off is asked for, and once the Machine reports Off, On.
	mustIpmitool(t, ep, "3", "power", "cycle")
	g.Eventually(func(g Gomega) {
		g.Expect(machineEvents(g, t, m)).To(ContainSubstring("IPMI chassis power cycle from 127.0.0.1 as admin"))
	}).Should(Succeed())
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Spec.PowerState).To(Equal(machinev1alpha1.PowerOn))
		g.Expect(m.Status.PowerState).To(Equal(machinev1alpha1.PowerOn))
	})

	// freeipmi, a second, independent client.
	testpeer.NeedTool(t, "ipmipower", "freeipmi-tools")
	ipmipower := func(pass, arg string) (string, error) {
		out, err := exec.CommandContext(t.Context(), "ipmipower", "-D", "LAN_2_0", "-I", "17", "-h", ep,
			"-u", "admin", "-p", pass, "--session-timeout=5000", arg).CombinedOutput()
		return string(out), err
	}
	out, err := ipmipower("s3cret-bmc", "--off")
	g.Expect(err).NotTo(HaveOccurred(), out)
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.PowerState).To(Equal(machinev1alpha1.PowerOff))
	})
	out, err = ipmipower("s3cret-bmc", "--stat")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring(": off"))
	out, _ = ipmipower("wrong", "--on")
	g.Expect(out).To(ContainSubstring("password invalid"))

	// A wrong password is refused by ipmitool's RAKP 2 check, and the
	// Machine is untouched.
	out, err = ipmitool(t, ep, "wrong", "3", "power", "on")
	g.Expect(err).To(HaveOccurred(), out)
	g.Expect(strings.ToLower(out)).To(ContainSubstring("unable to establish ipmi v2 / rmcp+ session"))
	got = waitMachine(t, m, func(Gomega, *machinev1alpha1.Machine) {})
	g.Expect(got.Spec.PowerState).To(Equal(machinev1alpha1.PowerOff))
}
