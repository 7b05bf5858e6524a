package main

import (
	"github.com/spf13/pflag"

	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/setup"
)

// addMachineFlags adds the Machine controller's and the providers' flags.
func addMachineFlags(f *pflag.FlagSet, o *machineoptions.Machines) {
	f.DurationVar(&o.DrainTimeout, "machine-drain-timeout", o.DrainTimeout, "how long the drain of a deleted Machine's Node may take before the deletion goes on (default 10m)")
	f.StringVar(&o.StateDir, "machine-state-dir", o.StateDir, "QEMU VMs' pidfiles, QMP sockets and console logs (default "+machineoptions.DefaultMachineStateDir+"; `up`: <data-dir>/machines)")
	f.StringVar(&o.ImageDir, "machine-image-dir", o.ImageDir, "image store of QemuMachine spec.image (default "+machineoptions.DefaultMachineImageDir+"; `up`: <data-dir>/images; `make images` fills it)")
	f.StringVar(&o.Netns, "machine-netns", o.Netns, "network namespace for the bridges and taps of QemuMachine NICs (needs root); empty: QEMU user-mode networking")
	f.StringVar(&o.QemuAccel, "machine-qemu-accel", o.QemuAccel, "QEMU accelerator for QemuMachines: kvm, tcg, or empty for KVM where the CPU advertises vmx/svm and /dev/kvm opens, else TCG")
	f.IntVar(&o.NetbootHTTPPort, "netboot-http-port", o.NetbootHTTPPort, "port of the network boot HTTP server the DHCP agent runs on the server address of each IPPool with networkBoot, inside --machine-netns (default 8069)")
	f.DurationVar(&o.PowerDownGrace, "machine-power-down-grace", o.PowerDownGrace, "how long a VM gets to power down (ACPI) before QEMU quits (default 30s)")
}

// addQemuMachinesModeFlags adds where QemuMachine VMs run (`run` only:
// under `converge up` they always run in its process).
func addQemuMachinesModeFlags(f *pflag.FlagSet, o *machineoptions.Machines) {
	f.StringVar(&o.QemuMachines, "qemu-machines", o.QemuMachines, "where QemuMachine VMs run: manager (in this process, as converge up does) or agent (under the per-node 'converge agent machines' DaemonSet; the manager only binds QemuMachines to nodes with a heartbeating agent) (default manager)")
	f.StringVar(&o.AgentLeaseNamespace, "machine-agent-lease-namespace", o.AgentLeaseNamespace, "namespace of the machine agents' heartbeat Leases, with --qemu-machines=agent (default "+machineoptions.DefaultAgentLeaseNamespace+")")
	f.DurationVar(&o.AgentCheckInterval, "machine-agent-check-interval", o.AgentCheckInterval, "how often the heartbeats of the machine agents are looked at again, with --qemu-machines=agent (default 5s)")
}

// addBMCFlags adds the virtual BMCs' flags.
func addBMCFlags(f *pflag.FlagSet, o *setup.BMCOptions) {
	f.StringVar(&o.BindAddress, "bmc-bind-address", o.BindAddress, "address the virtual BMCs listen on (IPMI UDP and Redfish HTTPS, a port pair per BMC); in a cluster 0.0.0.0 (default 127.0.0.1)")
	f.StringVar(&o.AdvertiseAddress, "bmc-advertise-address", o.AdvertiseAddress, "address the BMC endpoints name (with --bmc-expose=Service: the EndpointSlices; in a cluster the Pod IP) and the Redfish certificate carries (default: --bmc-bind-address)")
	f.StringVar(&o.Netns, "bmc-netns", o.Netns, "network namespace the virtual BMCs listen in (needs root); empty: the manager's own")
	f.StringVar(&o.CASecret, "bmc-ca-secret", o.CASecret, "[namespace/]name of the Secret keeping the CA of the BMCs' Redfish certificates (created once; in the manager's namespace, which tenants cannot write); default converge-bmc-ca in the manager's namespace (`converge up`: converge-system)")
	f.StringVar(&o.Expose, "bmc-expose", o.Expose, "how BMC endpoints are published: Local (the listeners' own addresses) or Service (a Service of the MachineBMC's spec.service.type, in its namespace, pointing at --bmc-advertise-address)")
}

// addDHCPAgentFlags adds the flags of the DHCP agent's cluster mode
// (`converge run` only: `up` is local mode).
func addDHCPAgentFlags(f *pflag.FlagSet, o *setup.DHCPAgentOptions) {
	f.StringVar(&o.Image, "dhcp-agent-image", o.Image, "cluster mode of the DHCP agent: run one Deployment of this converge image per IPPool network (`converge agent dhcp`) instead of serving inside the manager; empty: local mode (--machine-netns)")
	f.StringVar(&o.Namespace, "dhcp-agent-namespace", o.Namespace, "namespace of the DHCP agent Deployments and their Leases (default: the manager's)")
	f.StringVar(&o.ServiceAccount, "dhcp-agent-service-account", "converge-dhcp-agent", "ServiceAccount of the DHCP agent Pods (bound to the dhcp-agent ClusterRole)")
	f.StringVar(&o.Attachment, "dhcp-agent-attachment", "{network}", "the agent Pods' k8s.v1.cni.cncf.io/networks annotation, {network} replaced by the network's name; an IPPool's dhcp.converge.dev/agent-attachment annotation overrides it")
	f.StringVar(&o.Interface, "dhcp-agent-interface", "net1", "the attachment's interface in the agent Pod (--interface of `converge agent dhcp`)")
}
