// Package graph builds the graph of Converge's world around one object from
// what the API server holds: owner references, Sync inventories and the
// references each Converge kind makes (one table, Kinds). Each node carries
// its kstatus status with a reason, a message and its last Events; each edge
// says why it exists. Every read is made with the caller's client, so a
// tenant sees only what it may read: an object it may not read is a node with
// status Forbidden, never an error. RootCause walks the graph to the deepest
// object that is not Current while everything it needs is.
package graph

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Status is a node's kstatus status, or why it could not be read.
type Status string

// The statuses of a node: kstatus's, plus Forbidden (the caller may not read
// the object) and Unknown (the read failed otherwise).
const (
	Current     Status = Status(kstatus.CurrentStatus)
	InProgress  Status = Status(kstatus.InProgressStatus)
	Failed      Status = Status(kstatus.FailedStatus)
	Terminating Status = Status(kstatus.TerminatingStatus)
	NotFound    Status = Status(kstatus.NotFoundStatus)
	Forbidden   Status = "Forbidden"
	Unknown     Status = Status(kstatus.UnknownStatus)
)

// Ref names an object.
type Ref struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// GVK is the reference's group, version and kind.
func (r Ref) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
}

// String is Kind/name, with the namespace when set: Kind/ns/name.
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// key identifies an object whatever version it is referred to with.
func (r Ref) key() string { return r.Group + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name }

// Event is one of a node's last Events.
type Event struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
	Last    time.Time `json:"last"`
}

// Node is one object of the graph.
type Node struct {
	Ref     Ref     `json:"ref"`
	Status  Status  `json:"status"`
	Reason  string  `json:"reason,omitempty"`
	Message string  `json:"message,omitempty"`
	Events  []Event `json:"events,omitempty"`
	// Edges lead away from the root: down to what the object applies, owns
	// and needs, or (Graph.Up) up to what applies, owns and needs it.
	Edges []Edge `json:"-"`

	obj *unstructured.Unstructured
}

// Edge is one edge, read from the upper object to the lower one.
type Edge struct {
	Why  Relation
	Node *Node
}

// Graph is the graph around Root.
type Graph struct {
	Root *Node
	// Up is true when Edges lead up (to what applies, owns or needs).
	Up bool
	// Truncated is true when MaxNodes was reached.
	Truncated bool
}

// Builder reads the graph with the caller's client.
type Builder struct {
	// Client reads objects (unstructured) and Events with the caller's
	// identity; its RESTMapper resolves kinds.
	Client client.Client
	// MaxNodes bounds the graph (default 2000).
	MaxNodes int
	// Events is the number of last Events kept per node (default 3).
	Events int
}

type walk struct {
	b     *Builder
	nodes map[string]*Node
	// lists caches the lists made for owned and reverse lookups, per
	// kind and namespace, so reads are bounded by the graph's namespaces.
	lists map[string][]unstructured.Unstructured
	// listed holds the objects of the kinds and namespaces listed ahead
	// (by key), so that many siblings of one kind cost one LIST, not a GET
	// each; known lists the listKeys they came from.
	listed map[string]*unstructured.Unstructured
	known  map[string]bool
	// events are a namespace's Events by involvedObject.uid, listed once
	// per namespace (nil when the caller may not list them).
	evByNS    map[string]map[string][]corev1.Event
	truncated bool
}

// prefetchAt is the number of siblings of one kind and namespace from which
// they are read with one LIST rather than a GET each.
const prefetchAt = 8

func (b *Builder) newWalk() *walk {
	if b.MaxNodes == 0 {
		b.MaxNodes = 2000
	}
	if b.Events == 0 {
		b.Events = 3
	}
	return &walk{b: b, nodes: map[string]*Node{}, lists: map[string][]unstructured.Unstructured{},
		listed: map[string]*unstructured.Unstructured{}, known: map[string]bool{}, evByNS: map[string]map[string][]corev1.Event{}}
}

// Down builds the graph below root: what it applies, owns and needs, and so
// on down.
func (b *Builder) Down(ctx context.Context, root Ref) (*Graph, error) {
	return b.build(ctx, root, false)
}

// Up builds the graph above root: what applies, owns and needs it, and so
// on up. Objects needing it are found in its namespace.
func (b *Builder) Up(ctx context.Context, root Ref) (*Graph, error) {
	return b.build(ctx, root, true)
}

// build walks breadth-first from root, below it or (up) above it, until
// MaxNodes objects are held.
func (b *Builder) build(ctx context.Context, root Ref, up bool) (*Graph, error) {
	w := b.newWalk()
	next := w.below
	if up {
		next = w.above
	}
	r := w.node(ctx, root)
	queue := []*Node{r}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		links := next(ctx, n)
		w.prefetch(ctx, links)
		for _, l := range links {
			if _, seen := w.nodes[w.canon(ctx, l.To).key()]; !seen && len(w.nodes) >= b.MaxNodes {
				w.truncated = true
				continue
			}
			c, fresh := w.get(ctx, l.To)
			n.Edges = append(n.Edges, Edge{Why: l.Why, Node: c})
			if fresh {
				queue = append(queue, c)
			}
		}
	}
	return &Graph{Root: r, Up: up, Truncated: w.truncated}, ctx.Err()
}

// canon fills a reference's version from the RESTMapper when missing and
// drops the namespace of cluster-scoped kinds.
func (w *walk) canon(_ context.Context, r Ref) Ref {
	m, err := w.b.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: r.Group, Kind: r.Kind}, versions(r.Version)...)
	if err != nil {
		return r
	}
	if r.Version == "" {
		r.Version = m.GroupVersionKind.Version
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		r.Namespace = ""
	}
	return r
}

func versions(v string) []string {
	if v == "" {
		return nil
	}
	return []string{v}
}

// get returns the node of r, reading it the first time (fresh).
func (w *walk) get(ctx context.Context, r Ref) (*Node, bool) {
	r = w.canon(ctx, r)
	if n, ok := w.nodes[r.key()]; ok {
		return n, false
	}
	return w.node(ctx, r), true
}

// prefetch lists, once per walk, each kind and namespace of which links
// name prefetchAt or more objects not yet read: a Sync's inventory of 1,000
// objects is read with a LIST per kind, not 1,000 GETs. A list that fails
// (not allowed, not served) leaves those objects to their own GETs.
func (w *walk) prefetch(ctx context.Context, links []Link) {
	count := map[string]int{}
	refs := map[string]Ref{}
	for _, l := range links {
		r := w.canon(ctx, l.To)
		if _, seen := w.nodes[r.key()]; seen || r.Version == "" {
			continue
		}
		k := listKey(r.GVK(), r.Namespace)
		count[k]++
		refs[k] = r
	}
	for k, c := range count {
		if c < prefetchAt || w.known[k] {
			continue
		}
		r := refs[k]
		items := w.list(ctx, r.GVK(), r.Namespace)
		if items == nil && !w.listedOK(k) {
			continue
		}
		w.known[k] = true
		for i := range items {
			w.listed[refOf(&items[i]).key()] = &items[i]
		}
	}
}

// listedOK is true when the list of key was made and answered.
func (w *walk) listedOK(key string) bool {
	l, ok := w.lists[key]
	return ok && l != nil
}

// node reads r (from a list made ahead when there is one) and computes its
// status.
func (w *walk) node(ctx context.Context, r Ref) *Node {
	r = w.canon(ctx, r)
	n := &Node{Ref: r}
	w.nodes[r.key()] = n
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.GVK())
	var err error
	if got, ok := w.listed[r.key()]; ok {
		u = got
	} else if w.known[listKey(r.GVK(), r.Namespace)] {
		err = apierrors.NewNotFound(schema.GroupResource{Group: r.Group, Resource: strings.ToLower(r.Kind)}, r.Name)
	} else {
		err = w.b.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, u)
	}
	switch {
	case apierrors.IsNotFound(err):
		n.Status, n.Message = NotFound, fmt.Sprintf("%s %s does not exist", r.Kind, nsName(r))
		return n
	case apierrors.IsForbidden(err):
		n.Status, n.Message = Forbidden, fmt.Sprintf("you may not read %s %s", r.Kind, nsName(r))
		return n
	case meta.IsNoMatchError(err):
		n.Status, n.Message = Unknown, fmt.Sprintf("the API server serves no kind %s", r.GVK())
		return n
	case err != nil:
		n.Status, n.Message = Unknown, fmt.Sprintf("reading %s %s: %v", r.Kind, nsName(r), err)
		return n
	}
	n.obj = u
	if k := lookup(r.Group, r.Kind); k != nil && k.Status != nil {
		n.Status, n.Reason, n.Message = k.Status(u)
	} else {
		n.Status, n.Reason, n.Message = statusOf(u)
	}
	n.Events = w.events(ctx, u)
	return n
}

func nsName(r Ref) string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// statusOf is kstatus's reading of u, with the reason and message of the
// condition that explains it (Stalled, then Ready, then Reconciling).
func statusOf(u *unstructured.Unstructured) (Status, string, string) {
	res, err := kstatus.Compute(u)
	if err != nil {
		return Unknown, "", fmt.Sprintf("computing the status: %v", err)
	}
	st := Status(res.Status)
	reason, msg := "", res.Message
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	cond := func(typ string) (string, string, string) {
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == typ {
				s, _ := m["status"].(string)
				r, _ := m["reason"].(string)
				msg, _ := m["message"].(string)
				return s, r, msg
			}
		}
		return "", "", ""
	}
	if st == Current {
		if s, r, _ := cond("Ready"); s == "True" {
			reason = r
		}
		return st, reason, msg
	}
	for _, c := range []struct{ typ, bad string }{{"Stalled", "True"}, {"Ready", "False"}, {"Ready", "Unknown"}, {"Reconciling", "True"}} {
		if s, r, m := cond(c.typ); s == c.bad && (r != "" || m != "") {
			return st, r, m
		}
	}
	for _, c := range res.Conditions {
		if c.Reason != "" {
			return st, c.Reason, msg
		}
	}
	return st, reason, msg
}

// events returns the last Events of u, newest last; none when the caller
// may not list Events.
func (w *walk) events(ctx context.Context, u *unstructured.Unstructured) []Event {
	if u.GetNamespace() == "" {
		return nil
	}
	byUID, ok := w.evByNS[u.GetNamespace()]
	if !ok {
		// One list per namespace of the graph, not one per object.
		l := &corev1.EventList{}
		if err := w.b.Client.List(ctx, l, client.InNamespace(u.GetNamespace())); err == nil {
			byUID = map[string][]corev1.Event{}
			for _, e := range l.Items {
				byUID[string(e.InvolvedObject.UID)] = append(byUID[string(e.InvolvedObject.UID)], e)
			}
		}
		w.evByNS[u.GetNamespace()] = byUID
	}
	evs := byUID[string(u.GetUID())]
	out := make([]Event, 0, len(evs))
	for _, e := range evs {
		last := e.LastTimestamp.Time
		if e.Series != nil && !e.Series.LastObservedTime.IsZero() {
			last = e.Series.LastObservedTime.Time
		}
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.IsZero() {
			last = e.CreationTimestamp.Time
		}
		out = append(out, Event{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count, Last: last})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Last.Before(out[j].Last) })
	if len(out) > w.b.Events {
		out = out[len(out)-w.b.Events:]
	}
	return out
}

// below are the links down from n: the references it makes, the objects
// that serve it, and the objects it owns.
func (w *walk) below(ctx context.Context, n *Node) []Link {
	if n.obj == nil {
		return nil
	}
	k := lookup(n.Ref.Group, n.Ref.Kind)
	if k == nil {
		return nil
	}
	var out []Link
	if k.Links != nil {
		out = append(out, k.Links(n.obj)...)
	}
	if k.Drains {
		out = append(out, w.blockers(ctx, n)...)
	}
	for _, rv := range k.Serves {
		items := w.list(ctx, rv.Kind, n.Ref.Namespace)
		for i := range items {
			if rv.Target(&items[i]) == n.Ref.Name {
				out = append(out, Link{Needs, refOf(&items[i])})
			}
		}
	}
	for _, ok := range k.Owns {
		items := w.list(ctx, ok, n.Ref.Namespace)
		for i := range items {
			for _, or := range items[i].GetOwnerReferences() {
				if or.UID == n.obj.GetUID() {
					out = append(out, Link{Owns, refOf(&items[i])})
				}
			}
		}
	}
	return out
}

// inventoryLists reports whether the Sync sync lists r in its inventory.
// The Sync labels on an object are anyone's to write (a tenant can set
// another namespace's Sync on its own object), so they only say which Sync
// to ask: the link is kept when that Sync, read with the caller's
// identity, owns r by its inventory, never on the labels alone.
func (w *walk) inventoryLists(ctx context.Context, sync, r Ref) bool {
	s, _ := w.get(ctx, sync)
	if s.obj == nil {
		return false
	}
	want := w.canon(ctx, r).key()
	for _, l := range syncLinks(s.obj) {
		if l.Why == Applies && w.canon(ctx, l.To).key() == want {
			return true
		}
	}
	return false
}

// above are the links up from n: its owners, the Sync that applied it, the
// objects of its namespace whose references name it, and (for a
// PodDisruptionBudget) the objects whose drain it refuses.
func (w *walk) above(ctx context.Context, n *Node) []Link {
	var out []Link
	if n.obj != nil {
		for _, or := range n.obj.GetOwnerReferences() {
			gv, _ := schema.ParseGroupVersion(or.APIVersion)
			out = append(out, Link{Owns, Ref{Group: gv.Group, Version: gv.Version, Kind: or.Kind, Namespace: n.Ref.Namespace, Name: or.Name}})
		}
		l := n.obj.GetLabels()
		if name, ns := l["gitops.converge.dev/sync-name"], l["gitops.converge.dev/sync-namespace"]; name != "" && ns != "" {
			sync := Ref{Group: "gitops.converge.dev", Version: "v1alpha1", Kind: "Sync", Namespace: ns, Name: name}
			if w.inventoryLists(ctx, sync, n.Ref) {
				out = append(out, Link{Applies, sync})
			}
		}
	}
	if n.Ref.Namespace == "" {
		return out
	}
	for _, k := range Kinds {
		if k.Links == nil {
			continue
		}
		items := w.list(ctx, k.GVK, n.Ref.Namespace)
		for i := range items {
			for _, l := range k.Links(&items[i]) {
				if l.Why == Needs && w.canon(ctx, l.To).key() == n.Ref.key() {
					out = append(out, Link{Needs, refOf(&items[i])})
				}
			}
		}
	}
	// A PodDisruptionBudget blocks the drains it refuses.
	out = append(out, w.blocked(ctx, n)...)
	// A reference served the other way round (a MachineBMC names its
	// Machine): the object named needs this one.
	if n.obj != nil {
		for _, e := range Kinds {
			for _, rv := range e.Serves {
				if rv.Kind.Group != n.Ref.Group || rv.Kind.Kind != n.Ref.Kind {
					continue
				}
				if name := rv.Target(n.obj); name != "" {
					out = append(out, Link{Needs, Ref{Group: e.GVK.Group, Version: e.GVK.Version, Kind: e.GVK.Kind, Namespace: n.Ref.Namespace, Name: name}})
				}
			}
		}
	}
	return out
}

func listKey(k schema.GroupVersionKind, ns string) string { return k.Group + "/" + k.Kind + "/" + ns }

// list lists kind k in namespace ns once per walk; a list the caller may
// not make (or of a kind not served) is empty.
func (w *walk) list(ctx context.Context, k schema.GroupVersionKind, ns string) []unstructured.Unstructured {
	key := listKey(k, ns)
	if l, ok := w.lists[key]; ok {
		return l
	}
	ul := &unstructured.UnstructuredList{}
	ul.SetGroupVersionKind(k.GroupVersion().WithKind(k.Kind + "List"))
	if err := w.b.Client.List(ctx, ul, client.InNamespace(ns)); err != nil {
		w.lists[key] = nil
		return nil
	}
	w.lists[key] = ul.Items
	return ul.Items
}

func refOf(u *unstructured.Unstructured) Ref {
	gvk := u.GroupVersionKind()
	return Ref{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

// ParseRef reads KIND/NAME (or KIND NAME) in namespace ns.
func ParseRef(arg, ns string) (Ref, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok || name == "" || kind == "" {
		return Ref{}, fmt.Errorf("%q: want KIND/NAME, for example database/orders", arg)
	}
	gvk, err := ParseKind(kind)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: ns, Name: name}, nil
}

// Cause is the answer of RootCause: the path from the root to the cause.
type Cause struct {
	// Path runs from the root (first) to the root cause (last), with the
	// relation that leads to each step (Path[0]'s is empty).
	Path []Edge
}

// RootCause is the deepest object below the root, on a path of objects
// that are not Current, that is not Current while everything it applies,
// owns and needs is: the path to it, or nil when the root and everything
// below it is Current. What blocks an object (a PodDisruptionBudget
// refusing its drain) is followed first, then needs, applies and owns.
//
// An object that is not Current while everything directly below it is may
// still wait on something further down a "needs" path through Current
// objects: a MachineUpgrade held on a Machine that runs (Current) whose
// MachineBMC has lost its credentials Secret. Such a path is followed
// (needs edges only, through Current objects) to the first object that is
// not Current, and the walk goes on from there; the object itself is the
// cause only when no such path exists.
func (g *Graph) RootCause() *Cause {
	if g.Up {
		return nil
	}
	w := causeWalk{seen: map[*Node]bool{}}
	below := w.find(g.Root)
	if len(below) == 0 && g.Root.Status == Current {
		return nil
	}
	return &Cause{Path: append([]Edge{{Node: g.Root}}, below...)}
}

// causeWalk is RootCause's walk down the graph; seen keeps it from
// visiting a node twice.
type causeWalk struct{ seen map[*Node]bool }

// find returns the path from n down to the root cause below it: the first
// not-Current object on a needs, applies or owns edge, in that order, and
// on down from it; with none, from a not-Current n, a path through Current
// objects on needs edges (through).
func (w causeWalk) find(n *Node) []Edge {
	w.seen[n] = true
	for _, rel := range []Relation{BlockedBy, Needs, Applies, Owns} {
		for _, e := range n.Edges {
			if e.Why != rel || w.seen[e.Node] || e.Node.Status == Current {
				continue
			}
			return append([]Edge{e}, w.find(e.Node)...)
		}
	}
	if n.Status == Current {
		return nil
	}
	for _, e := range n.Edges {
		if e.Why != Needs || w.seen[e.Node] {
			continue
		}
		if p := w.through(e.Node); p != nil {
			return append([]Edge{e}, p...)
		}
	}
	return nil
}

// through follows needs edges from a Current object to the first object
// that is not Current, and on down from it.
func (w causeWalk) through(n *Node) []Edge {
	w.seen[n] = true
	for _, e := range n.Edges {
		if (e.Why != Needs && e.Why != BlockedBy) || w.seen[e.Node] {
			continue
		}
		if e.Node.Status != Current {
			return append([]Edge{e}, w.find(e.Node)...)
		}
		if p := w.through(e.Node); p != nil {
			return append([]Edge{e}, p...)
		}
	}
	return nil
}

// Next is the command a person runs next about n.
func Next(n *Node) string {
	if n.Status == Forbidden {
		res := strings.ToLower(n.Ref.Kind) + "s"
		if n.Ref.Group != "" {
			res += "." + n.Ref.Group
		}
		if n.Ref.Namespace == "" {
			return fmt.Sprintf("ask your admin for read access (kubectl auth can-i get %s %s)", res, n.Ref.Name)
		}
		return fmt.Sprintf("ask your admin for read access (kubectl auth can-i get %s %s -n %s)", res, n.Ref.Name, n.Ref.Namespace)
	}
	if k := lookup(n.Ref.Group, n.Ref.Kind); k != nil && k.Next != nil {
		return k.Next(n)
	}
	kind := strings.ToLower(n.Ref.Kind)
	if n.Ref.Group != "" {
		kind += "." + n.Ref.Group
	}
	if n.Status == NotFound {
		return fmt.Sprintf("create %s %s, or fix the reference to it", n.Ref.Kind, nsName(n.Ref))
	}
	if n.Ref.Namespace == "" {
		return fmt.Sprintf("kubectl describe %s %s", kind, n.Ref.Name)
	}
	return fmt.Sprintf("kubectl -n %s describe %s %s", n.Ref.Namespace, kind, n.Ref.Name)
}

// Then is the command a person runs on the root once its cause is fixed,
// when the root is not the cause, has given up (Failed) and its kind has a
// command of its own: a MachineUpgrade that failed a step on a Machine
// whose BMC lost its Secret is retried (converge upgrade retry) once the
// Secret is back. "" otherwise.
func Then(root, cause *Node) string {
	if root == cause || root.Status != Failed {
		return ""
	}
	if k := lookup(root.Ref.Group, root.Ref.Kind); k != nil && k.Next != nil {
		return k.Next(root)
	}
	return ""
}

// ErrNotCurrent is returned by callers (converge why) when the object is
// not Current.
var ErrNotCurrent = errors.New("not Current")

// Age formats how long ago t was, for Events.
func Age(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case t.IsZero():
		return "?"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
