package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitopscli"
	"github.com/converge-dev/converge/internal/graph"
	"github.com/converge-dev/converge/internal/reconcilecli"
	"github.com/converge-dev/converge/internal/setup"
)

// gitopsClient builds a client and resolves the namespace of the verb:
// -n, else the kubeconfig context's, else "default".
func gitopsClient(g *globalFlags) (client.Client, string, error) {
	cfg, err := restConfig(g.kubeconfig)
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, "", err
	}
	ns := g.namespace
	if ns == "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if g.kubeconfig != "" {
			rules.ExplicitPath = g.kubeconfig
		} else if rules.GetExplicitFile() == "" && len(rules.Precedence) == 0 {
			rules.ExplicitPath = localKubeconfig
		}
		if n, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace(); err == nil && n != "" {
			ns = n
		} else {
			ns = "default"
		}
	}
	return c, ns, nil
}

func newReconcileCommand(g *globalFlags) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "reconcile KIND/NAME",
		Short: "Ask for an immediate reconciliation of a " + strings.Join(graph.Requestable(), ", "),
		Long: `Set converge.dev/reconcile-requested-at on the object, so its controller
reconciles it now instead of at its next interval, and wait until the
controller has handled the request (status.lastHandledReconcileAt).
KIND is one of: ` + strings.Join(graph.Requestable(), ", ") + ` (KIND NAME works too).
A GitRepository fetches; a Sync applies its source's current artifact (to
fetch and apply, reconcile the GitRepository); a Database observes its
server and corrects drift.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := gitopsClient(g)
			if err != nil {
				return err
			}
			ref, err := reconcilecli.ParseArgs(args, ns)
			if err != nil {
				return err
			}
			return reconcilecli.Reconcile(cmd.Context(), c, cmd.OutOrStdout(), ref, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the result; 0 does not wait")
	return cmd
}

func newSyncCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "sync", Short: "Act on Syncs"}
	cmd.AddCommand(&cobra.Command{
		Use:   "approve-prune NAME",
		Short: "Approve the prune a Sync holds because it exceeds pruneLimit",
		Long: `Approve the prune listed in the Sync's status.pendingPrune, for exactly the
revision it was computed for (converge.dev/approve-prune: <revision>). A later
revision that again exceeds pruneLimit needs a new approval.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := gitopsClient(g)
			if err != nil {
				return err
			}
			return gitopscli.ApprovePrune(cmd.Context(), c, cmd.OutOrStdout(), types.NamespacedName{Namespace: ns, Name: args[0]})
		},
	})
	return cmd
}

func newDiffCommand(g *globalFlags) *cobra.Command {
	var opts gitopscli.DiffOptions
	cmd := &cobra.Command{
		Use:   "diff sync NAME",
		Short: "Show what applying a Sync would create, change and prune",
		Long: `Fetch the Sync's source (or --revision), render it, and server-side
dry-run every object as the Sync would apply it: prints created (+),
configured (~, with a diff) and pruned (-) objects. Changes nothing.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if k, err := graph.ParseKind(args[0]); err != nil || k.Kind != "Sync" || k.Group != gitopsv1alpha1.GroupVersion.Group {
				return fmt.Errorf("diff: only syncs can be diffed, not %q", args[0])
			}
			c, ns, err := gitopsClient(g)
			if err != nil {
				return err
			}
			_, err = gitopscli.Diff(cmd.Context(), c, cmd.OutOrStdout(), types.NamespacedName{Namespace: ns, Name: args[1]}, opts)
			return err
		},
	}
	cmd.Flags().StringVar(&opts.Revision, "revision", "", "commit SHA to diff instead of the GitRepository's ref")
	return cmd
}
