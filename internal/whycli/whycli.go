// Package whycli implements `converge tree` and `converge why` on the graph
// of internal/graph: tree prints the graph below (or above) an object as
// kubectl tree and flux tree do, with status columns; why prints the
// object's state and the chain down to its root cause with the command to
// run next.
package whycli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/graph"
)

// Options are the flags of tree and why.
type Options struct {
	// Up prints the graph above the object (tree only).
	Up bool
	// Output is "" (a table) or "json".
	Output string
	// Color paints statuses (on a terminal).
	Color bool
	// Now is the time Event ages are computed against.
	Now time.Time
}

func build(ctx context.Context, c client.Client, ns, arg string, up bool) (*graph.Graph, error) {
	ref, err := graph.ParseRef(arg, ns)
	if err != nil {
		return nil, err
	}
	b := &graph.Builder{Client: c}
	if up {
		return b.Up(ctx, ref)
	}
	return b.Down(ctx, ref)
}

// jsonNode is a node in -o json: the tree, with an object reached twice
// written in full once and by reference after.
type jsonNode struct {
	*graph.Node
	Why      string      `json:"why,omitempty"`
	Seen     bool        `json:"seen,omitempty"`
	Children []*jsonNode `json:"children,omitempty"`
}

func toJSON(n *graph.Node, why string, up bool, seen map[*graph.Node]bool) *jsonNode {
	j := &jsonNode{Node: n, Why: why}
	if seen[n] {
		j.Seen = true
		return j
	}
	seen[n] = true
	for _, e := range n.Edges {
		w := string(e.Why)
		if up {
			w = e.Why.Inverse()
		}
		j.Children = append(j.Children, toJSON(e.Node, w, up, seen))
	}
	return j
}

// Tree prints the graph below (or, with o.Up, above) KIND/NAME.
func Tree(ctx context.Context, c client.Client, w io.Writer, ns, arg string, o Options) error {
	g, err := build(ctx, c, ns, arg, o.Up)
	if err != nil {
		return err
	}
	if g.Root.Status == graph.NotFound {
		return fmt.Errorf("%s not found", g.Root.Ref)
	}
	if o.Output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(toJSON(g.Root, "", g.Up, map[*graph.Node]bool{}))
	}
	if o.Output != "" {
		return fmt.Errorf("unknown output format %q (want json)", o.Output)
	}
	var rows [][]string
	seen := map[*graph.Node]bool{}
	var walk func(n *graph.Node, prefix, branch, why string)
	walk = func(n *graph.Node, prefix, branch, why string) {
		name := n.Ref.Kind + "/" + n.Ref.Name
		if why != "" {
			name = why + " " + name
		}
		again := seen[n]
		if again {
			name += " (above)"
		}
		rows = append(rows, []string{n.Ref.Namespace, prefix + branch + name, string(n.Status), n.Reason, oneLine(n.Message, 90)})
		if again {
			return
		}
		seen[n] = true
		child := prefix
		switch branch {
		case "├─":
			child += "│ "
		case "└─":
			child += "  "
		}
		for i, e := range n.Edges {
			b := "├─"
			if i == len(n.Edges)-1 {
				b = "└─"
			}
			w := string(e.Why)
			if g.Up {
				w = e.Why.Inverse()
			}
			walk(e.Node, child, b, w)
		}
	}
	walk(g.Root, "", "", "")
	printTable(w, []string{"NAMESPACE", "NAME", "STATUS", "REASON", "MESSAGE"}, rows, 2, o.Color)
	if g.Truncated {
		_, _ = fmt.Fprintln(w, "(the graph was cut at its size limit)")
	}
	return nil
}

// Why prints the state of KIND/NAME and the chain to its root cause. It
// returns graph.ErrNotCurrent (wrapped) when the object is not Current.
func Why(ctx context.Context, c client.Client, w io.Writer, ns, arg string, o Options) error {
	g, err := build(ctx, c, ns, arg, false)
	if err != nil {
		return err
	}
	r := g.Root
	if r.Status == graph.NotFound {
		return fmt.Errorf("%s not found", r.Ref)
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	cause := g.RootCause()
	if o.Output == "json" {
		out := struct {
			Object *graph.Node `json:"object"`
			Path   []*jsonNode `json:"path,omitempty"`
			Cause  *graph.Node `json:"rootCause,omitempty"`
			Next   string      `json:"next,omitempty"`
			Then   string      `json:"then,omitempty"`
		}{Object: r}
		if cause != nil {
			for _, e := range cause.Path {
				out.Path = append(out.Path, &jsonNode{Node: e.Node, Why: string(e.Why)})
			}
			last := cause.Path[len(cause.Path)-1].Node
			out.Cause, out.Next, out.Then = last, graph.Next(last), graph.Then(r, last)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		paint := func(s graph.Status) string { return colour(string(s), s, o.Color) }
		_, _ = fmt.Fprintf(w, "%s/%s in %s is %s", r.Ref.Kind, r.Ref.Name, r.Ref.Namespace, paint(r.Status))
		if r.Reason != "" {
			_, _ = fmt.Fprintf(w, " (%s)", r.Reason)
		}
		_, _ = fmt.Fprintln(w)
		if r.Message != "" {
			_, _ = fmt.Fprintf(w, "  %s\n", oneLine(r.Message, 200))
		}
		switch {
		case cause == nil:
			_, _ = fmt.Fprintln(w, "Everything it applies, owns and needs is Current.")
		case len(cause.Path) > 1:
			_, _ = fmt.Fprintln(w, "\nChain:")
			for i, e := range cause.Path[1:] {
				n := e.Node
				_, _ = fmt.Fprintf(w, "  %s└─%s %s/%s", strings.Repeat("  ", i), e.Why, n.Ref.Kind, n.Ref.Name)
				if n.Ref.Namespace != r.Ref.Namespace && n.Ref.Namespace != "" {
					_, _ = fmt.Fprintf(w, " (in %s)", n.Ref.Namespace)
				}
				_, _ = fmt.Fprintf(w, "  %s", paint(n.Status))
				if n.Reason != "" {
					_, _ = fmt.Fprintf(w, " %s", n.Reason)
				}
				_, _ = fmt.Fprintln(w)
			}
		}
		if cause != nil {
			last := cause.Path[len(cause.Path)-1].Node
			_, _ = fmt.Fprintf(w, "\nRoot cause: %s/%s", last.Ref.Kind, last.Ref.Name)
			if last.Ref.Namespace != "" {
				_, _ = fmt.Fprintf(w, " in %s", last.Ref.Namespace)
			}
			_, _ = fmt.Fprintf(w, " is %s", paint(last.Status))
			if last.Reason != "" {
				_, _ = fmt.Fprintf(w, " (%s)", last.Reason)
			}
			_, _ = fmt.Fprintln(w)
			if last.Message != "" {
				_, _ = fmt.Fprintf(w, "  %s\n", oneLine(last.Message, 300))
			}
			if len(last.Events) > 0 {
				_, _ = fmt.Fprintln(w, "  Events:")
				for _, e := range last.Events {
					_, _ = fmt.Fprintf(w, "    %s ago  %s  %s  %s\n", graph.Age(now, e.Last), e.Type, e.Reason, oneLine(e.Message, 160))
				}
			}
			_, _ = fmt.Fprintf(w, "Next: %s\n", graph.Next(last))
			if then := graph.Then(r, last); then != "" {
				_, _ = fmt.Fprintf(w, "Then: %s\n", then)
			}
		}
	}
	if r.Status != graph.Current {
		return fmt.Errorf("%s/%s is %s: %w", r.Ref.Kind, r.Ref.Name, r.Status, graph.ErrNotCurrent)
	}
	return nil
}

func oneLine(s string, limit int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > limit {
		return string(r[:limit-1]) + "…"
	}
	return s
}

// colour paints s by status when on is set.
func colour(s string, st graph.Status, on bool) string {
	if !on {
		return s
	}
	code := "33" // yellow: in progress
	switch st {
	case graph.Current:
		code = "32"
	case graph.Failed, graph.NotFound, graph.Forbidden:
		code = "31"
	case graph.Unknown, graph.Terminating:
		code = "35"
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// printTable pads columns by their width in runes (so the tree's box
// characters and colours do not shift them); column statusCol is painted.
func printTable(w io.Writer, head []string, rows [][]string, statusCol int, color bool) {
	widths := make([]int, len(head))
	for _, r := range append([][]string{head}, rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(r []string, paint bool) {
		var b strings.Builder
		for i, c := range r {
			cell := c
			if i < len(r)-1 {
				cell += strings.Repeat(" ", widths[i]-len([]rune(c))+2)
			}
			if paint && i == statusCol {
				cell = colour(cell, graph.Status(c), color)
			}
			b.WriteString(cell)
		}
		_, _ = fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(head, false)
	for _, r := range rows {
		line(r, true)
	}
}
