package main

import (
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/machineagent"
	"github.com/converge-dev/converge/internal/setup"
)

// newAgentMachinesCommand is `converge agent machines`: the per-node agent
// that runs the QEMU VMs of the QemuMachines bound to its node.
func newAgentMachinesCommand(g *globalFlags) *cobra.Command {
	c := machineagent.Config{}
	cmd := &cobra.Command{
		Use:   "machines",
		Short: "Run the QEMU VMs of the QemuMachines bound to this node (spec.nodeName)",
		Long: `Runs on every node that may host VMs (a DaemonSet in a cluster, with the
manager started with --qemu-machines=agent): runs the QemuMachine reconciler
for the QemuMachines whose spec.nodeName is this node, and renews the heartbeat
Lease machine-agent-<node> in --lease-namespace, which the manager's scheduler
reads to bind new QemuMachines and to report a silent agent (AgentReady=False,
AgentNotHeartbeating). It never stops a VM when it exits: a restarted agent
re-attaches to each QEMU through the pidfile and QMP socket in
--machine-state-dir. Needs qemu-system-x86_64, /dev/kvm for KVM, and root
(CAP_NET_ADMIN) for --machine-netns bridges and taps.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel, cfg, err := startNodeAgent(cmd, g, &c.NodeName)
			if err != nil {
				return err
			}
			defer cancel()
			c.RESTConfig, c.Scheme = cfg, setup.Scheme()
			c.Log = ctrl.Log.WithName("machineagent").WithValues("node", c.NodeName)
			return machineagent.Run(ctx, c)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.NodeName, "node-name", "", "this node's name (default $NODE_NAME)")
	f.StringVar(&c.Machines.StateDir, "machine-state-dir", machineoptions.DefaultMachineStateDir, "QEMU VMs' pidfiles, QMP sockets and console logs (a hostPath: it must outlive the agent)")
	f.StringVar(&c.Machines.ImageDir, "machine-image-dir", machineoptions.DefaultMachineImageDir, "image store of QemuMachine spec.image")
	f.StringVar(&c.Machines.Netns, "machine-netns", "", "network namespace for the bridges and taps of QemuMachine NICs (needs root); empty: QEMU user-mode networking")
	f.StringVar(&c.Machines.QemuAccel, "machine-qemu-accel", "", "QEMU accelerator: kvm, tcg, or empty for KVM where the CPU advertises vmx/svm and /dev/kvm opens, else TCG")
	f.StringVar(&c.Machines.QemuBinary, "machine-qemu-binary", "", "path of qemu-system-x86_64 (default: looked up in PATH)")
	f.DurationVar(&c.Machines.PowerDownGrace, "machine-power-down-grace", 0, "how long a VM gets to power down (ACPI) before QEMU quits (default 30s)")
	f.StringVar(&c.LeaseNamespace, "lease-namespace", machineoptions.DefaultAgentLeaseNamespace, "namespace of the heartbeat Lease (the manager's --machine-agent-lease-namespace)")
	f.DurationVar(&c.LeaseDuration, "lease-duration", machineagent.DefaultLeaseDuration, "how long one heartbeat counts; a silent agent is reported after it")
	f.DurationVar(&c.RenewInterval, "renew-interval", machineagent.DefaultRenewInterval, "how often the heartbeat Lease is renewed")
	f.StringVar(&c.HealthProbeBindAddress, "health-probe-bind-address", ":8082", "address of /healthz and /readyz; '0' disables")
	return cmd
}
