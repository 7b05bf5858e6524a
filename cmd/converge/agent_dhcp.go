package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/converge-dev/converge/internal/controller/dhcpagent"
	"github.com/converge-dev/converge/internal/dhcp"
	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/useragent"
)

// newAgentDHCPCommand is `converge agent dhcp`: the DHCP agent of one
// network in cluster mode (a Deployment per network, made by the manager's
// dhcp-agent-deployment controller).
func newAgentDHCPCommand(g *globalFlags) *cobra.Command {
	c := dhcpagent.AgentConfig{}
	cmd := &cobra.Command{
		Use:   "dhcp",
		Short: "Serve DHCP (and network boot) for the IPPools of one network; needs CAP_NET_ADMIN, CAP_NET_RAW, CAP_NET_BIND_SERVICE",
		Long: `Runs the DHCP agent of one network outside the manager (cluster mode: a
Deployment per network whose Pod has an attachment to that network). It
watches the IPPools with spec.networkName=--network and answers on
--interface with the allocations recorded in their status only; pools with
networkBoot also get the network boot HTTP server. One agent per network
answers: the holder of the Lease dhcp-<network> in --lease-namespace; the
others stand by, and take over when the holder releases the Lease (on
SIGTERM) or stops renewing it. While the API server is unreachable the
holder keeps serving from its cache.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setupLogging(g, os.Stderr); err != nil {
				return err
			}
			cfg, ns, err := loadConfig(g.kubeconfig)
			if err != nil {
				return err
			}
			if c.LeaseNamespace == "" {
				c.LeaseNamespace = g.namespace
			}
			if c.LeaseNamespace == "" {
				c.LeaseNamespace = ns
			}
			cfg.UserAgent = useragent.For("dhcp-agent")
			c.RESTConfig, c.Scheme = cfg, setup.Scheme()
			c.Log = ctrl.Log.WithName("dhcp-agent").WithValues("network", c.Network)
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			return dhcpagent.RunAgent(ctx, c)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Network, "network", "", "spec.networkName of the IPPools to serve (required)")
	f.StringVar(&c.Interface, "interface", "net1", "interface to serve on: the network attachment's (Multus names the first one net1)")
	f.StringVar(&c.Netns, "netns", "", "named network namespace holding --interface (default: the agent's own)")
	f.StringVar(&c.LeaseNamespace, "lease-namespace", "", "namespace of the network's Lease (default: -n, else the kubeconfig context's or the Pod's namespace)")
	f.StringVar(&c.Identity, "identity", "", "this agent's name in the Lease and in status.agent (default: host name and a random suffix)")
	f.StringVar(&c.ImageDir, "image-dir", machineoptions.DefaultMachineImageDir, "image store network boot serves kernels and initrds from (mount QemuMachine's there)")
	f.IntVar(&c.NetBootPort, "netboot-http-port", dhcp.DefaultNetBootPort, "port of the network boot HTTP server on the server address of each IPPool with networkBoot")
	f.DurationVar(&c.LeaseDuration, "lease-duration", dhcpagent.DefaultLeaseDuration, "how long a silent holder keeps the network before a standby takes it")
	f.DurationVar(&c.RenewInterval, "renew-interval", dhcpagent.DefaultRenewInterval, "how often the holder renews the Lease and a standby checks it")
	_ = cmd.MarkFlagRequired("network")
	return cmd
}
