// Package infrastructuremachine is the infrastructure-machine contract in
// code: the fields any provider kind (QemuMachine, KwokMachine, or a third
// party's) exposes so that the generic Machine controller can drive it,
// read and written on unstructured objects so that the Machine controller
// never imports a provider's Go types. docs/contracts/infrastructure-machine.md
// is the same contract in prose; the conformance subpackage tests a kind
// against it.
package infrastructuremachine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Contract field paths, relative to the object root.
var (
	// Written by the Machine controller.
	PowerStatePath        = []string{"spec", "powerState"}
	BootDevicePath        = []string{"spec", "bootDevice"}
	BootOncePath          = []string{"spec", "bootOnce"}
	ImagePath             = []string{"spec", "image"}
	NetworkInterfacesPath = []string{"spec", "networkInterfaces"}
	// Written by the provider.
	ProviderIDPath         = []string{"spec", "providerID"}
	ProvisionedPath        = []string{"status", "provisioned"}
	ObservedPowerStatePath = []string{"status", "powerState"}
	ObservedBootDevicePath = []string{"status", "bootDevice"}
	AddressesPath          = []string{"status", "addresses"}
	ConsoleLogPath         = []string{"status", "consoleLog"}
	ConditionsPath         = []string{"status", "conditions"}
	ObservedGenerationPath = []string{"status", "observedGeneration"}
)

// Power states and boot devices of the contract (the same strings as the
// Machine API's).
const (
	PowerOn        = "On"
	PowerOff       = "Off"
	BootDisk       = "Disk"
	BootNetwork    = "Network"
	BootCDROM      = "CDROM"
	ReadyCondition = "Ready"
)

// NetworkInterface is one NIC as the contract writes it.
type NetworkInterface struct {
	Name       string
	Network    string
	MACAddress string
}

// Desired is what the Machine controller asks of a provider object.
type Desired struct {
	PowerState        string
	BootDevice        string
	BootOnce          bool
	Image             string
	NetworkInterfaces []NetworkInterface
}

// SpecPatch returns a JSON merge patch setting the desired fields. A nil
// NetworkInterfaces leaves the provider's NICs as they are (used while a
// duplicate MAC is reported).
func SpecPatch(d Desired) map[string]any {
	spec := map[string]any{
		"powerState": d.PowerState,
		"bootDevice": d.BootDevice,
		"bootOnce":   d.BootOnce,
	}
	if d.Image != "" {
		spec["image"] = d.Image
	} else {
		spec["image"] = nil
	}
	if d.NetworkInterfaces != nil {
		nics := make([]any, 0, len(d.NetworkInterfaces))
		for _, n := range d.NetworkInterfaces {
			nics = append(nics, map[string]any{"name": n.Name, "network": n.Network, "macAddress": n.MACAddress})
		}
		spec["networkInterfaces"] = nics
	}
	return map[string]any{"spec": spec}
}

// SpecMatches reports whether u's spec already holds d, so that no patch is
// needed.
func SpecMatches(u *unstructured.Unstructured, d Desired) bool {
	ps, _, _ := unstructured.NestedString(u.Object, PowerStatePath...)
	bd, _, _ := unstructured.NestedString(u.Object, BootDevicePath...)
	bo, _, _ := unstructured.NestedBool(u.Object, BootOncePath...)
	img, _, _ := unstructured.NestedString(u.Object, ImagePath...)
	if ps != d.PowerState || bd != d.BootDevice || bo != d.BootOnce || img != d.Image {
		return false
	}
	if d.NetworkInterfaces == nil {
		return true
	}
	nics, _, _ := unstructured.NestedSlice(u.Object, NetworkInterfacesPath...)
	if len(nics) != len(d.NetworkInterfaces) {
		return false
	}
	for i, n := range nics {
		m, ok := n.(map[string]any)
		want := d.NetworkInterfaces[i]
		if !ok || m["name"] != want.Name || m["network"] != want.Network || m["macAddress"] != want.MACAddress {
			return false
		}
	}
	return true
}

// Address is an observed address.
type Address struct {
	Type    string
	Address string
}

// Status is what a provider object reports under the contract.
type Status struct {
	// ProviderID is spec.providerID.
	ProviderID string
	// Provisioned is status.provisioned.
	Provisioned bool
	// PowerState and BootDevice are the observed ones.
	PowerState string
	BootDevice string
	// Addresses is status.addresses.
	Addresses []Address
	// ConsoleLog is status.consoleLog.
	ConsoleLog string
	// Stale is true when status.observedGeneration lags
	// metadata.generation: the provider has not yet acted on the spec.
	Stale bool
	// Ready is the provider's Ready condition, nil when absent.
	Ready *metav1.Condition
}

// ViolationError says a provider object breaks the contract.
type ViolationError struct{ Problems []string }

func (e *ViolationError) Error() string {
	return "the provider object does not honour the infrastructure-machine contract: " + strings.Join(e.Problems, "; ")
}

// NodeOwnerAnnotation is set by a provider on each Node it registers (or
// has its machine's kubelet register) for a provider object; its value is
// NodeOwner of that object. The Machine controller claims, drains and
// deletes only a Node carrying its provider object's value: a Node found by
// spec.providerID alone (a value a tenant may write) is never claimed.
// Tenants cannot write Nodes, so they cannot forge it.
const NodeOwnerAnnotation = "machine.converge.dev/provider-object"

// NodeOwner is the value of NodeOwnerAnnotation for a provider object:
// "<namespace>/<name>/<uid>".
func NodeOwner(o metav1.Object) string {
	return o.GetNamespace() + "/" + o.GetName() + "/" + string(o.GetUID())
}

// NodeName is the name of the Node registered for the provider object
// namespace/name of a provider whose Nodes are named with prefix:
// <prefix>-<namespace>-<name>-<hash of namespace/name>, the readable part
// shortened when too long for a Node name. The hash keeps two namespaces
// apart whose names join to the same string (a-b/c and a/b-c).
func NodeName(prefix, namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	suffix := "-" + hex.EncodeToString(sum[:5])
	n := prefix + "-" + namespace + "-" + name
	// 63 keeps it a valid kubernetes.io/hostname label value too.
	if len(n)+len(suffix) > 63 {
		n = strings.TrimRight(n[:63-len(suffix)], "-.")
	}
	return n + suffix
}

// TenantLabel on a Node names the namespace of the provider object it was
// registered for.
const TenantLabel = "machine.converge.dev/namespace"

// TenantTaint is the NoSchedule taint (value: the namespace) on every Node
// registered for a namespaced provider object: only Pods tolerating it (the
// tenant's own, or what the cluster admin allows) are scheduled there.
func TenantTaint(namespace string) corev1.Taint {
	return corev1.Taint{Key: TenantLabel, Value: namespace, Effect: corev1.TaintEffectNoSchedule}
}

// IsViolation reports whether err is a contract violation.
func IsViolation(err error) bool {
	var v *ViolationError
	return errors.As(err, &v)
}

// Read reads the contract's provider-written fields. A provisioned object
// must publish a providerID and a valid observed power state, or Read
// returns a *ViolationError.
func Read(u *unstructured.Unstructured) (Status, error) {
	var s Status
	var problems []string
	str := func(path []string) string {
		v, _, err := unstructured.NestedString(u.Object, path...)
		if err != nil {
			problems = append(problems, strings.Join(path, ".")+" must be a string")
		}
		return v
	}
	s.ProviderID = str(ProviderIDPath)
	prov, _, err := unstructured.NestedBool(u.Object, ProvisionedPath...)
	if err != nil {
		problems = append(problems, "status.provisioned must be a boolean")
	}
	s.Provisioned = prov
	s.PowerState = str(ObservedPowerStatePath)
	s.BootDevice = str(ObservedBootDevicePath)
	s.ConsoleLog = str(ConsoleLogPath)
	if s.PowerState != "" && s.PowerState != PowerOn && s.PowerState != PowerOff {
		problems = append(problems, fmt.Sprintf("status.powerState must be On or Off (is %q)", s.PowerState))
	}
	if s.Provisioned {
		if s.ProviderID == "" {
			problems = append(problems, "spec.providerID must be set once status.provisioned is true")
		}
		if s.PowerState == "" {
			problems = append(problems, "status.powerState must be set once status.provisioned is true")
		}
	}
	addrs, _, err := unstructured.NestedSlice(u.Object, AddressesPath...)
	if err != nil {
		problems = append(problems, "status.addresses must be a list")
	}
	for _, a := range addrs {
		m, ok := a.(map[string]any)
		if !ok {
			problems = append(problems, "status.addresses items must be objects")
			continue
		}
		t, _ := m["type"].(string)
		ad, _ := m["address"].(string)
		s.Addresses = append(s.Addresses, Address{Type: t, Address: ad})
	}
	og, _, err := unstructured.NestedInt64(u.Object, ObservedGenerationPath...)
	if err != nil {
		problems = append(problems, "status.observedGeneration must be an integer")
	}
	s.Stale = og < u.GetGeneration()
	s.Ready = condition(u, ReadyCondition)
	if len(problems) > 0 {
		return Status{}, &ViolationError{Problems: problems}
	}
	return s, nil
}

func condition(u *unstructured.Unstructured, typ string) *metav1.Condition {
	conds, _, _ := unstructured.NestedSlice(u.Object, ConditionsPath...)
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		out := &metav1.Condition{Type: typ}
		s, _ := m["status"].(string)
		out.Status = metav1.ConditionStatus(s)
		out.Reason, _ = m["reason"].(string)
		out.Message, _ = m["message"].(string)
		return out
	}
	return nil
}

var macRE = regexp.MustCompile(`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`)

// ValidMAC reports why mac is not a usable NIC address: it must be
// lowercase, colon-separated and unicast (the least significant bit of the
// first octet clear). Empty means valid.
func ValidMAC(mac string) string {
	if !macRE.MatchString(mac) {
		return "must be six lowercase hex octets separated by colons"
	}
	var first byte
	_, _ = fmt.Sscanf(mac[:2], "%02x", &first)
	if first&1 == 1 {
		return "must be a unicast address (the first octet's lowest bit is the multicast bit)"
	}
	if mac == "00:00:00:00:00:00" {
		return "must not be all zeroes"
	}
	return ""
}
