package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/rollout"
)

func newRolloutCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Manage the rollout of a BasicDeployment, as kubectl rollout",
		Long: `Manage the rollout of a BasicDeployment, as kubectl rollout does for a
Deployment. NAME may be written basicdeployment/NAME, bd/NAME or NAME.

  converge rollout status basicdeployment/web
  converge rollout history basicdeployment/web [--revision 2]
  converge rollout undo basicdeployment/web [--to-revision 2]
  converge rollout pause basicdeployment/web
  converge rollout resume basicdeployment/web`,
	}
	cmd.AddCommand(rolloutStatus(g), rolloutHistory(g), rolloutUndo(g), rolloutPause(g, true), rolloutPause(g, false))
	return cmd
}

// target parses basicdeployment/NAME (or a short form) into a key.
func target(g *globalFlags, args []string) (client.Client, client.ObjectKey, error) {
	arg := args[0]
	if len(args) == 2 {
		arg = args[0] + "/" + args[1]
	}
	name := arg
	if kind, n, ok := strings.Cut(arg, "/"); ok {
		switch strings.ToLower(kind) {
		case "basicdeployment", "basicdeployments", "bd", "bdeploy",
			"basicdeployment.workloads.converge.dev", "basicdeployments.workloads.converge.dev":
		default:
			return nil, client.ObjectKey{}, fmt.Errorf("rollout works on basicdeployments, not %q", kind)
		}
		name = n
	}
	c, ns, err := verbClient(g)
	if err != nil {
		return nil, client.ObjectKey{}, err
	}
	return c, client.ObjectKey{Namespace: ns, Name: name}, nil
}

func rolloutStatus(g *globalFlags) *cobra.Command {
	var watch bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status basicdeployment/NAME",
		Short: "Watch a rollout until it completes or its progress deadline passes",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := target(g, args)
			if err != nil {
				return err
			}
			return rollout.Status(cmd.Context(), c, key, cmd.OutOrStdout(), watch, timeout)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", true, "keep watching until the rollout ends")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: never)")
	return cmd
}

func rolloutHistory(g *globalFlags) *cobra.Command {
	var revision int64
	cmd := &cobra.Command{
		Use:   "history basicdeployment/NAME",
		Short: "List the revisions kept (revisionHistoryLimit) with their change-cause",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := target(g, args)
			if err != nil {
				return err
			}
			revs, err := rollout.History(cmd.Context(), c, key)
			if err != nil {
				return err
			}
			return rollout.PrintHistory(cmd.OutOrStdout(), key, revs, revision)
		},
	}
	cmd.Flags().Int64Var(&revision, "revision", 0, "show the Pod template of this revision")
	return cmd
}

func rolloutUndo(g *globalFlags) *cobra.Command {
	var to int64
	cmd := &cobra.Command{
		Use:   "undo basicdeployment/NAME",
		Short: "Roll back to the previous revision, or to --to-revision",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := target(g, args)
			if err != nil {
				return err
			}
			rev, err := rollout.Undo(cmd.Context(), c, key, to)
			if errors.Is(err, rollout.ErrAlreadyCurrent) {
				fmt.Fprintf(cmd.OutOrStdout(), "basicdeployment.workloads.converge.dev/%s skipped rollback (current template already matches revision %d)\n", key.Name, rev)
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "basicdeployment.workloads.converge.dev/%s rolled back to revision %d\n", key.Name, rev)
			return nil
		},
	}
	cmd.Flags().Int64Var(&to, "to-revision", 0, "the revision to roll back to (0: the previous one)")
	return cmd
}

func rolloutPause(g *globalFlags, pause bool) *cobra.Command {
	use, short, done := "resume", "Resume a paused rollout", "resumed"
	if pause {
		use, short, done = "pause", "Pause rollouts: template changes wait until resume (scaling still works)", "paused"
	}
	return &cobra.Command{
		Use:   use + " basicdeployment/NAME",
		Short: short,
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := target(g, args)
			if err != nil {
				return err
			}
			if err := rollout.SetPaused(cmd.Context(), c, key, pause); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "basicdeployment.workloads.converge.dev/%s %s\n", key.Name, done)
			return nil
		},
	}
}
