package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/upgradecli"
)

func newUpgradeCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "upgrade",
		Aliases: []string{"upgrades", "mup"},
		Short:   "Show a MachineUpgrade's steps, Machines and events; pause, resume, retry, skip or abort it",
		Long: `Work with MachineUpgrades (upgrade.converge.dev).

  converge upgrade status NAME [--events N]   steps, per-Machine progress, one timeline of events
  converge upgrade logs NAME [--tail N]       the end of each Machine's serial console
  converge upgrade pause NAME                 no new step starts (a step in flight finishes)
  converge upgrade resume NAME
  converge upgrade retry NAME                 re-run the failed step of the failed Machine(s)
  converge upgrade skip NAME MACHINE REASON   move on without MACHINE
  converge upgrade abort NAME                 stop after the steps in flight (cannot be undone)`,
	}
	var events int
	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Print the step table, each Machine's progress and the merged timeline of events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := verbClient(g)
			if err != nil {
				return err
			}
			return upgradecli.Status(cmd.Context(), c, cmd.OutOrStdout(), ns, args[0], events, time.Now())
		},
	}
	status.Flags().IntVar(&events, "events", 50, "the last N events of the timeline (0: all)")
	var tail int
	logs := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the end of each Machine's serial console, in the upgrade's order",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := verbClient(g)
			if err != nil {
				return err
			}
			return upgradecli.Logs(cmd.Context(), c, cmd.OutOrStdout(), ns, args[0], tail)
		},
	}
	logs.Flags().IntVar(&tail, "tail", 20, "the last N lines of each console (0: all)")
	verb := func(use, short, done string, f func(ctx context.Context, c client.Client, ns, name string) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " NAME",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, ns, err := verbClient(g)
				if err != nil {
					return err
				}
				if err := f(cmd.Context(), c, ns, args[0]); err != nil {
					return err
				}
				_, _ = fmt.Fprintf(cmd.OutOrStdout(), "machineupgrade.upgrade.converge.dev/%s %s\n", args[0], done)
				return nil
			},
		}
	}
	skip := &cobra.Command{
		Use:   "skip NAME MACHINE REASON",
		Short: "Move on without MACHINE (it is marked Skipped with REASON)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := verbClient(g)
			if err != nil {
				return err
			}
			if err := upgradecli.Skip(cmd.Context(), c, ns, args[0], args[1], args[2]); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "machineupgrade.upgrade.converge.dev/%s skip %s requested\n", args[0], args[1])
			return nil
		},
	}
	cmd.AddCommand(status, logs,
		verb("pause", "Stop new steps from starting", "paused", upgradecli.Pause),
		verb("resume", "Let new steps start again", "resumed", upgradecli.Resume),
		verb("retry", "Re-run the failed step of the failed Machine(s), with fresh attempts", "retry requested",
			func(ctx context.Context, c client.Client, ns, name string) error {
				return upgradecli.Retry(ctx, c, ns, name, time.Now())
			}),
		skip,
		verb("abort", "Stop after the steps in flight, leaving every Machine in a defined state", "abort requested", upgradecli.Abort))
	return cmd
}
