package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/internal/graph"
	"github.com/converge-dev/converge/internal/whycli"
)

func newTreeCommand(g *globalFlags) *cobra.Command {
	o := whycli.Options{}
	cmd := &cobra.Command{
		Use:   "tree KIND/NAME",
		Short: "Print what an object applies, owns and needs (--up: what applies, owns and needs it), with statuses",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := verbClient(g)
			if err != nil {
				return err
			}
			o.Color = onTerminal(cmd)
			return whycli.Tree(cmd.Context(), c, cmd.OutOrStdout(), ns, args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.Up, "up", false, "print the graph above the object instead of below it")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "output format: json")
	return cmd
}

func newWhyCommand(g *globalFlags) *cobra.Command {
	o := whycli.Options{}
	cmd := &cobra.Command{
		Use:   "why KIND/NAME",
		Short: "Say why an object is not Current: the chain down to the root cause and the command to run next",
		Long: `Print the object's state, then the chain of objects it needs down to the
root cause: the deepest object that is not Current while everything it needs
is. Exit status 0 when the object is Current, 2 otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := verbClient(g)
			if err != nil {
				return err
			}
			o.Color = onTerminal(cmd)
			err = whycli.Why(cmd.Context(), c, cmd.OutOrStdout(), ns, args[0], o)
			if errors.Is(err, graph.ErrNotCurrent) {
				os.Exit(2)
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "output format: json")
	return cmd
}

// onTerminal is true when the verb writes to a terminal and NO_COLOR is unset.
func onTerminal(cmd *cobra.Command) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := cmd.OutOrStdout().(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
