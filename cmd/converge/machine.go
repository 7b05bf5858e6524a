package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/qemumachine"
)

func newMachineCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "machine",
		Aliases: []string{"machines", "mach"},
		Short:   "List Machines, follow a serial console, power a Machine on, off or reset it",
		Long: `Work with Machines (machine.converge.dev).

  converge machine list
  converge machine console NAME [-f]
  converge machine power on|off|reset NAME`,
	}
	cmd.AddCommand(machineList(g), machineConsole(g), machinePower(g))
	return cmd
}

func machineList(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the Machines of the namespace",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := verbClient(g)
			if err != nil {
				return err
			}
			list := &machinev1alpha1.MachineList{}
			if err := c.List(cmd.Context(), list, client.InNamespace(ns)); err != nil {
				return err
			}
			return printMachines(cmd.OutOrStdout(), list.Items, time.Now())
		},
	}
}

func printMachines(out io.Writer, ms []machinev1alpha1.Machine, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	_, _ = fmt.Fprintln(w, "NAME\tPHASE\tPOWER\tPROVIDER\tADDRESS\tNODE\tAGE")
	for _, m := range ms {
		addr, node := "<none>", "<none>"
		if len(m.Status.Addresses) > 0 {
			addr = m.Status.Addresses[0].Address
		}
		if m.Status.NodeRef != nil {
			node = m.Status.NodeRef.Name
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, orNone(string(m.Status.Phase)), orNone(string(m.Status.PowerState)),
			m.Spec.InfrastructureRef.Kind, addr, node, duration.HumanDuration(now.Sub(m.CreationTimestamp.Time)))
	}
	return w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func machineConsole(g *globalFlags) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "console NAME",
		Short: "Print (and with -f follow) a Machine's serial console, from status.consoleLog on this host",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := verbClient(g)
			if err != nil {
				return err
			}
			m := &machinev1alpha1.Machine{}
			if err := c.Get(cmd.Context(), types.NamespacedName{Namespace: ns, Name: args[0]}, m); err != nil {
				return err
			}
			if m.Status.ConsoleLog == "" {
				return fmt.Errorf("machine %s has no console log (its provider publishes none yet)", args[0])
			}
			return followFile(cmd.Context(), cmd.OutOrStdout(), m.Status.ConsoleLog, follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what the console writes")
	return cmd
}

func followFile(ctx context.Context, out io.Writer, path string, follow bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading the console (it is kept on the host that runs the machine): %w", err)
	}
	defer f.Close()
	for {
		if _, err := io.Copy(out, f); err != nil {
			return err
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func machinePower(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "power on|off|reset NAME",
		Short: "Set a Machine's spec.powerState, or reset it (providers that support the reset annotation)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := verbClient(g)
			if err != nil {
				return err
			}
			key := types.NamespacedName{Namespace: ns, Name: args[1]}
			m := &machinev1alpha1.Machine{}
			if err := c.Get(cmd.Context(), key, m); err != nil {
				return err
			}
			var state machinev1alpha1.PowerState
			switch args[0] {
			case "on":
				state = machinev1alpha1.PowerOn
			case "off":
				state = machinev1alpha1.PowerOff
			case "reset":
				return resetMachine(cmd.Context(), cmd.OutOrStdout(), c, m)
			default:
				return errors.New("power takes on, off or reset")
			}
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"powerState": state}})
			if err := c.Patch(cmd.Context(), m, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "machine.machine.converge.dev/%s powerState %s\n", m.Name, state)
			return nil
		},
	}
}

// resetMachine writes a new reset token on the provider object.
func resetMachine(ctx context.Context, out io.Writer, c client.Client, m *machinev1alpha1.Machine) error {
	ref := m.Spec.InfrastructureRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gv.WithKind(ref.Kind))
	u.SetNamespace(m.Namespace)
	u.SetName(ref.Name)
	token := strconv.FormatInt(metav1.Now().UnixNano(), 10)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{qemumachine.ResetAnnotation: token}}})
	if err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("asking %s %s for a reset: %w", ref.Kind, ref.Name, err)
	}
	_, err = fmt.Fprintf(out, "%s/%s reset requested (token %s)\n", ref.Kind, ref.Name, token)
	return err
}
