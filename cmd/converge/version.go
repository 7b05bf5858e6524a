package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/internal/localcp"
	"github.com/converge-dev/converge/internal/version"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "converge %s (%s, %s/%s; local control plane: Kubernetes %s)\n",
				version.Get(), runtime.Version(), runtime.GOOS, runtime.GOARCH, localcp.KubernetesVersion)
			return err
		},
	}
}
