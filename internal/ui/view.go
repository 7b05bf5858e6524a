package ui

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/converge-dev/converge/internal/graph"
)

// graphView is what the "graph" template renders: one tree per root, each
// with its root cause.
type graphView struct {
	Error string
	Roots []rootView
	// Truncated is set when a graph was cut at its size limit.
	Truncated bool
	// Hidden are the kinds of the namespace the caller may not list.
	Hidden []string
}

type rootView struct {
	Tree  *nodeView
	Cause *nodeView
	// Next is the command to run about the cause.
	Next string
}

// nodeView is one node as the page shows it. An object reached twice is
// shown in full once; after that, Again is set and its children left out.
type nodeView struct {
	Key        string
	Why        string
	Kind, Name string
	Namespace  string
	// OtherNS is set when the object is not in the root's namespace.
	OtherNS         bool
	Status          graph.Status
	Reason, Message string
	Events          []eventView
	OnPath, Cause   bool
	Again           bool
	Children        []*nodeView
}

type eventView struct {
	Type, Reason, Message, When string
}

func isForbidden(err error) bool { return apierrors.IsForbidden(err) }

// view turns graphs into what the template shows, marking each graph's
// root-cause path.
func view(graphs []*graph.Graph, err error) graphView {
	var v graphView
	if err != nil {
		v.Error = err.Error()
		return v
	}
	for _, g := range graphs {
		v.Truncated = v.Truncated || g.Truncated
		onPath := map[*graph.Node]bool{}
		var cause *graph.Node
		if c := g.RootCause(); c != nil {
			for _, e := range c.Path {
				onPath[e.Node] = true
			}
			cause = c.Path[len(c.Path)-1].Node
		}
		seen := map[*graph.Node]bool{}
		var rec func(n *graph.Node, why string) *nodeView
		rec = func(n *graph.Node, why string) *nodeView {
			nv := &nodeView{Key: key(n.Ref), Why: why, Kind: n.Ref.Kind, Name: n.Ref.Name, Namespace: n.Ref.Namespace,
				OtherNS: n.Ref.Namespace != g.Root.Ref.Namespace, Status: n.Status, Reason: n.Reason, Message: n.Message,
				OnPath: onPath[n], Cause: n == cause, Again: seen[n]}
			if nv.Again {
				nv.Cause = false
				return nv
			}
			seen[n] = true
			for _, e := range n.Events {
				nv.Events = append(nv.Events, eventView{Type: e.Type, Reason: e.Reason, Message: e.Message, When: e.Last.UTC().Format(time.DateTime)})
			}
			for _, e := range n.Edges {
				nv.Children = append(nv.Children, rec(e.Node, string(e.Why)))
			}
			return nv
		}
		rv := rootView{Tree: rec(g.Root, "")}
		if cause != nil {
			rv.Cause = &nodeView{Key: key(cause.Ref), Kind: cause.Ref.Kind, Name: cause.Ref.Name, Namespace: cause.Ref.Namespace,
				Status: cause.Status, Reason: cause.Reason, Message: cause.Message}
			rv.Next = graph.Next(cause)
		}
		v.Roots = append(v.Roots, rv)
	}
	return v
}
