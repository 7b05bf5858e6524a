// Package spec holds the rules of the machine and infrastructure API groups
// that more than one component applies: the stable MAC of a NIC that sets
// none (the Machine webhook defaults it, the Machine controller indexes it,
// the IPPool controller leases on it) and the provider ID each built-in
// provider writes (its controller writes it, the webhook refuses any other).
// Admission webhooks and controllers both import it; it imports neither.
package spec

import (
	"crypto/sha256"
	"fmt"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
)

// GenerateMAC returns the stable MAC address of a NIC that sets none: a
// locally administered unicast address (first octet 0x02 with the low bits
// of a hash) derived from the Machine's namespace, name and the NIC's name.
// The same inputs always give the same address, so a recreated Machine
// keeps its MAC (and its DHCP lease).
func GenerateMAC(namespace, name, nic string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name + "/" + nic))
	// 0x02: locally administered, unicast; keep the low bits of the hash
	// in the first octet's upper nibble for more spread.
	first := (sum[0] &^ 0x03) | 0x02
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", first, sum[1], sum[2], sum[3], sum[4], sum[5])
}

// EffectiveNICs returns m's NICs with generated MACs filled in.
func EffectiveNICs(m *machinev1alpha1.Machine) []machinev1alpha1.NetworkInterface {
	out := make([]machinev1alpha1.NetworkInterface, len(m.Spec.NetworkInterfaces))
	for i, n := range m.Spec.NetworkInterfaces {
		if n.MACAddress == "" {
			n.MACAddress = GenerateMAC(m.Namespace, m.Name, n.Name)
		}
		out[i] = n
	}
	return out
}
