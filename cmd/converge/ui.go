package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/ui"
)

func newUICommand(g *globalFlags) *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "ui [KIND/NAME]",
		Short: "Serve a live, read-only graph of an object (or of a namespace) on 127.0.0.1, with its root cause highlighted",
		Long: `Serve a read-only page on 127.0.0.1 that shows what converge tree shows:
the graph below KIND/NAME (or below every Converge object of the namespace
when no object is given), each object with its status, and the path to the
root cause highlighted. The page updates within a second of a change: the
server watches the kinds the graph reaches and pushes each new rendering to
the page (Server-Sent Events).

Every read and watch is made with your kubeconfig's identity: you see what you
may read, and an object you may not read is shown as Forbidden. The URL
printed carries a random token made for this run; a request without it is
refused (403). Ctrl-C stops the server.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, ns, err := loadConfig(g.kubeconfig)
			if err != nil {
				return err
			}
			if g.namespace != "" {
				ns = g.namespace
			}
			c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
			if err != nil {
				return fmt.Errorf("building a client: %w", err)
			}
			o := ui.Options{Config: cfg, Client: c, Namespace: ns}
			if len(args) == 1 {
				o.Target = args[0]
			}
			s, err := ui.New(o)
			if err != nil {
				return err
			}
			ln, url, err := s.Listen(address)
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "converge ui: open %s\n(the token in the URL is this run's; Ctrl-C stops)\n", url)
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			return s.Serve(ctx, ln)
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:0", "address to serve the page on (loopback only; port 0 picks a free one)")
	return cmd
}
