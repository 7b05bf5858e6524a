package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/internal/certcli"
)

func newCertCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "cert", Short: "Inspect and renew Certificates (pki.converge.dev)"}
	status := &cobra.Command{
		Use: "status NAME", Short: "Show a Certificate: conditions, chain, expiry, renewal time, the last request and why it failed",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := gitopsClient(g)
			if err != nil {
				return err
			}
			return certcli.Status(cmd.Context(), c, cmd.OutOrStdout(), ns, args[0])
		},
	}
	renew := &cobra.Command{
		Use: "renew NAME", Short: "Issue a new certificate now", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := gitopsClient(g)
			if err != nil {
				return err
			}
			if _, err := certcli.Renew(cmd.Context(), c, ns, args[0]); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "Renewal of %s/%s requested\n", ns, args[0])
			return nil
		},
	}
	inspect := &cobra.Command{Use: "inspect", Short: "Inspect objects holding certificates"}
	inspect.AddCommand(&cobra.Command{
		Use: "secret NAME", Short: "Show the chain, key and ca.crt of a TLS Secret", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := gitopsClient(g)
			if err != nil {
				return err
			}
			return certcli.InspectSecret(cmd.Context(), c, cmd.OutOrStdout(), ns, args[0])
		},
	})
	cmd.AddCommand(status, renew, inspect)
	return cmd
}
