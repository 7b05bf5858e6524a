// Command converge is the one Converge binary: `run` starts the manager
// against a cluster, `up` runs a local control plane with the manager, and
// user verbs act on Converge objects. It only parses flags; the work is done
// in internal/setup, internal/up and friends.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		// Errors are written for people (localcp.UserError carries a fix);
		// never a stack trace.
		fmt.Fprintln(os.Stderr, "converge: "+err.Error())
		os.Exit(1)
	}
}

// globalFlags are shared by every verb, with kubectl's names.
type globalFlags struct {
	kubeconfig string
	namespace  string
	logFormat  string
	logLevel   string
}

func newRootCommand() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "converge",
		Short: "Converge runs a platform of Kubernetes controllers",
		Long: `Converge is one binary that runs a platform of Kubernetes controllers:
git -> cluster (GitOps), cluster -> cluster (parent/child workloads) and
cluster -> outside world (databases and other external systems).

  converge up      run a local control plane with the manager (start here)
  converge run     run the manager against a cluster`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then .converge/kubeconfig, then in-cluster)")
	pf.StringVarP(&g.namespace, "namespace", "n", "", "namespace of the objects a verb acts on (default: the kubeconfig context's)")
	pf.StringVar(&g.logFormat, "log-format", "console", "log format: console or json")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: error, info, debug, or a number (higher is more verbose)")
	root.AddCommand(newRunCommand(g), newUpCommand(g), newVersionCommand(),
		newRolloutCommand(g), newReconcileCommand(g), newSyncCommand(g), newDiffCommand(g), newAgentCommand(g),
		newMachineCommand(g), newUpgradeCommand(g))
	root.AddCommand(newCertCommand(g))
	root.AddCommand(newTreeCommand(g), newWhyCommand(g), newUICommand(g))
	return root
}
