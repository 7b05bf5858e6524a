package upgradecli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

// Logs prints, for each Machine of the upgrade in its order, a header (its
// state and step) and the last tail lines (0: all) of the serial console
// its provider keeps (Machine status.consoleLog). The console file is on the
// host that runs the machine: with `converge up` that is this host; in a
// cluster it is the manager's or agent's Pod, and Logs says so instead of
// printing. Console lines carry no time: they are the console's end, not
// cut to the upgrade's steps.
func Logs(ctx context.Context, c client.Client, out io.Writer, ns, name string, tail int) error {
	u := &upgradev1alpha1.MachineUpgrade{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		return fmt.Errorf("reading MachineUpgrade %s/%s: %w", ns, name, err)
	}
	if len(u.Status.Machines) == 0 {
		_, _ = fmt.Fprintf(out, "MachineUpgrade %s/%s has selected no Machine yet\n", ns, name)
		return nil
	}
	for i, mp := range u.Status.Machines {
		if i > 0 {
			_, _ = fmt.Fprintln(out)
		}
		_, _ = fmt.Fprintf(out, "== Machine %s: %s, step %s %s\n", mp.Name, mp.State, orDash(string(mp.Step)), orDash(string(mp.StepState)))
		m := &machinev1alpha1.Machine{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: mp.Name}, m); err != nil {
			_, _ = fmt.Fprintf(out, "(reading Machine %s: %v)\n", mp.Name, err)
			continue
		}
		path := m.Status.ConsoleLog
		if path == "" {
			_, _ = fmt.Fprintf(out, "(its provider %s keeps no console)\n", m.Spec.InfrastructureRef.Kind)
			continue
		}
		lines, err := lastLines(path, tail)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			_, _ = fmt.Fprintf(out, "(console %s is on the host that runs the machine, not on this one)\n", path)
			continue
		case err != nil:
			_, _ = fmt.Fprintf(out, "(reading console %s: %v)\n", path, err)
			continue
		}
		for _, l := range lines {
			_, _ = fmt.Fprintln(out, l)
		}
	}
	return nil
}

// lastLines returns the last n lines of the file at path (all when n <= 0).
func lastLines(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if n > 0 && len(lines) > 2*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if n > 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, sc.Err()
}
