package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/converge-dev/converge/internal/lbagent"
	"github.com/converge-dev/converge/internal/setup"
)

// newAgentCommand groups the per-node data-plane agents.
func newAgentCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "agent", Short: "Run a per-node data-plane agent"}
	c := lbagent.Config{DefaultClass: true}
	lb := &cobra.Command{
		Use:   "loadbalancer",
		Short: "Program the LoadBalancer data plane (nftables) and announce addresses (ARP) on this node; needs root",
		Long: `Runs on every node (a DaemonSet with hostNetwork in a cluster): programs
nftables in its own table for every LoadBalancer address this node may
announce, takes a Lease per address so that exactly one node answers ARP,
and sets LoadBalancerReady on a Service only after a connection through the
address reached an endpoint. Needs root (CAP_NET_ADMIN, CAP_NET_RAW),
except with --userspace (one node, a proxy on addresses the host has).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel, cfg, err := startNodeAgent(cmd, g, &c.NodeName)
			if err != nil {
				return err
			}
			defer cancel()
			c.RESTConfig, c.Scheme = cfg, setup.Scheme()
			c.Log = ctrl.Log.WithName("lbagent").WithValues("node", c.NodeName)
			return lbagent.Run(ctx, c)
		},
	}
	f := lb.Flags()
	f.StringVar(&c.NodeName, "node-name", "", "this node's name (default $NODE_NAME)")
	f.StringVar(&c.Interface, "interface", "eth0", "interface to send gratuitous ARP on unless an L2Advertisement names one")
	f.StringVar(&c.NetNS, "netns", "", "run the data plane in this named network namespace (default: the agent's own)")
	f.StringVar(&c.LeaseNamespace, "lease-namespace", "converge-system", "namespace of the agents' Leases")
	f.BoolVar(&c.DefaultClass, "lb-default-class", true, "serve LoadBalancer Services that set no spec.loadBalancerClass")
	f.DurationVar(&c.LeaseDuration, "lease-duration", lbagent.DefaultLeaseDuration, "how long a silent agent keeps its addresses before another node takes them")
	f.DurationVar(&c.RenewInterval, "renew-interval", lbagent.DefaultRenewInterval, "how often the agent renews its heartbeat Lease")
	f.DurationVar(&c.ProbeInterval, "probe-interval", lbagent.DefaultProbeInterval, "how often reachability through each address is re-checked")
	f.Float32Var(&c.KubeAPIQPS, "kube-api-qps", lbagent.DefaultKubeAPIQPS, "client-side budget of Service status writes, requests per second (Lease writes have their own)")
	f.IntVar(&c.KubeAPIBurst, "kube-api-burst", lbagent.DefaultKubeAPIBurst, "burst of that budget")
	f.BoolVar(&c.Userspace, "userspace", false, "serve addresses with a userspace proxy instead of nftables: no root, no ARP, addresses the host already has (e.g. 127.240.0.0/24); one node only")
	cmd.AddCommand(lb)
	cmd.AddCommand(newAgentDHCPCommand(g))
	cmd.AddCommand(newAgentMachinesCommand(g))
	return cmd
}

// startNodeAgent is the common start of a per-node agent verb: logging, the
// node's name (--node-name, else $NODE_NAME, as a DaemonSet's fieldRef
// sets it), the REST config, and a context that SIGTERM or Ctrl-C ends
// (call cancel when done).
func startNodeAgent(cmd *cobra.Command, g *globalFlags, node *string) (context.Context, context.CancelFunc, *rest.Config, error) {
	if err := setupLogging(g, os.Stderr); err != nil {
		return nil, nil, nil, err
	}
	if *node == "" {
		*node = os.Getenv("NODE_NAME")
	}
	if *node == "" {
		return nil, nil, nil, errors.New("--node-name (or $NODE_NAME) is required")
	}
	cfg, err := restConfig(g.kubeconfig)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	return ctx, cancel, cfg, nil
}
