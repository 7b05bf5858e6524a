// Package ui serves `converge ui`: a read-only page on 127.0.0.1 that shows
// the graph of internal/graph for one object (KIND/NAME) or for every
// Converge object of a namespace, with the root-cause path highlighted, and
// that updates within a second of a status change.
//
// The page is rendered on the server (html/template); a small embedded
// script replaces the graph when the server pushes a new rendering over
// Server-Sent Events. Updates are watch-driven: the server watches every kind
// (and namespace) the graph reaches, rebuilds the graph shortly after any
// change and pushes it only when the rendering changed. Nothing polls.
//
// Every read and watch is made with the caller's own identity (its
// kubeconfig), so a tenant sees what it may read and no more: an object it may
// not read is shown as Forbidden, as `converge why` shows it. Every request
// must carry the per-run random token in its URL (?token=...), as local
// notebook servers require; a request without it is refused with 403.
package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/graph"
)

//go:embed page.html ui.js ui.css
var assets embed.FS

var page = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"statusClass": func(s graph.Status) string { return "st-" + strings.ToLower(string(s)) },
}).ParseFS(assets, "page.html"))

// Options configure a Server.
type Options struct {
	// Config is the caller's REST configuration: every read and watch is
	// made with it.
	Config *rest.Config
	// Client reads the graph; nil builds one from Config. It must act with
	// the same identity as Config.
	Client client.Client
	// Namespace is the namespace of Target, or the namespace shown when
	// Target is empty.
	Namespace string
	// Target is KIND/NAME, or "" for every Converge object of Namespace.
	Target string
	// Token is the secret every request must carry; "" draws a random one.
	Token string
	// Debounce is how long the server waits after a change for more before
	// rebuilding the graph (default 100ms).
	Debounce time.Duration
}

// Server is the page's HTTP server and the watches that keep it current.
type Server struct {
	o      Options
	c      client.Client
	target *graph.Ref
	w      *watcher
	// hidden are the kinds (namespace mode) the caller may not list.
	hidden []string

	mu      sync.Mutex
	current []byte // the latest rendering of the graph
	version uint64
	subs    map[chan struct{}]struct{}
}

// New checks o and prepares a server; Serve starts it.
func New(o Options) (*Server, error) {
	if o.Config == nil {
		return nil, errors.New("ui: no REST configuration")
	}
	if o.Namespace == "" {
		return nil, errors.New("ui: no namespace")
	}
	if o.Token == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		o.Token = hex.EncodeToString(b)
	}
	if o.Debounce == 0 {
		o.Debounce = 100 * time.Millisecond
	}
	c := o.Client
	if c == nil {
		var err error
		if c, err = client.New(o.Config, client.Options{}); err != nil {
			return nil, fmt.Errorf("ui: building a client: %w", err)
		}
	}
	s := &Server{o: o, c: c, subs: map[chan struct{}]struct{}{}}
	if o.Target != "" {
		r, err := graph.ParseRef(o.Target, o.Namespace)
		if err != nil {
			return nil, err
		}
		s.target = &r
	}
	w, err := newWatcher(o.Config, c.RESTMapper())
	if err != nil {
		return nil, err
	}
	s.w = w
	return s, nil
}

// Token is the per-run token requests must carry.
func (s *Server) Token() string { return s.o.Token }

// Listen opens address (host:port; port 0 picks a free one) and returns the
// listener and the page's URL, token included. Only loopback addresses are
// accepted: the page shows what the caller may read.
func (s *Server) Listen(address string) (net.Listener, string, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, "", fmt.Errorf("--address %q: %w", address, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, "", fmt.Errorf("--address %q: the page is served on loopback only (127.0.0.1 or ::1)", address)
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, "", err
	}
	return ln, "http://" + ln.Addr().String() + "/?token=" + s.o.Token, nil
}

// Serve builds the graph, starts the watches and serves the page on ln until
// ctx is done.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.rebuild(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.loop(ctx)
	}()
	// The watches stop once the loop, which starts them, has ended.
	defer func() {
		cancel()
		<-loopDone
		s.w.stop()
	}()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		return err
	}
}

// loop rebuilds the graph after each change the watches report, once
// changes stop for Debounce.
func (s *Server) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.w.changed:
		}
		t := time.NewTimer(s.o.Debounce)
	drain:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-s.w.changed:
			case <-t.C:
				break drain
			}
		}
		s.rebuild(ctx)
	}
}

// Handler serves the page (/), its script and style, and the stream of
// renderings (/events); every path needs the token.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.servePage)
	mux.HandleFunc("GET /events", s.serveEvents)
	mux.HandleFunc("GET /ui.js", s.serveAsset("ui.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /ui.css", s.serveAsset("ui.css", "text/css; charset=utf-8"))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.URL.Query().Get("token")
		if subtle.ConstantTimeCompare([]byte(tok), []byte(s.o.Token)) != 1 {
			http.Error(w, "forbidden: this page needs the token printed by `converge ui` in its URL", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) serveAsset(name, ctype string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		b, _ := assets.ReadFile(name)
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write(b)
	}
}

func (s *Server) servePage(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	cur, ver := s.current, s.version
	s.mu.Unlock()
	title := "namespace " + s.o.Namespace
	if s.target != nil {
		title = s.o.Target + " in " + s.o.Namespace
	}
	var b bytes.Buffer
	err := page.ExecuteTemplate(&b, "page", map[string]any{
		"Title": title, "Token": s.o.Token, "Graph": template.HTML(cur), "Version": ver, //nolint:gosec // rendered by html/template
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// serveEvents streams the graph's renderings: the current one at once, then
// each new one, as Server-Sent Events named "graph".
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}()
	ch <- struct{}{}
	keep := time.NewTicker(20 * time.Second)
	defer keep.Stop()
	var sent uint64
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-ch:
			s.mu.Lock()
			cur, ver := s.current, s.version
			s.mu.Unlock()
			if ver == sent && sent != 0 {
				continue
			}
			sent = ver
			if err := writeEvent(w, "graph", fmt.Sprint(ver), cur); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

func writeEvent(w io.Writer, name, id string, data []byte) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\nid: %s\n", name, id)
	for _, l := range bytes.Split(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(bytes.TrimSuffix(l, []byte("\r")))
		b.WriteString("\n")
	}
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}

// rebuild reads the graph(s), renders them, updates the watches to the kinds
// they reach, and notifies the streams when the rendering changed.
func (s *Server) rebuild(ctx context.Context) {
	s.hidden = nil
	graphs, err := s.graphs(ctx)
	if ctx.Err() != nil {
		return
	}
	v := view(graphs, err)
	v.Hidden = s.hidden
	var b bytes.Buffer
	if err := page.ExecuteTemplate(&b, "graph", v); err != nil {
		b.Reset()
		template.HTMLEscape(&b, []byte("rendering the graph: "+err.Error()))
	}
	about := map[string]bool{}
	for _, g := range graphs {
		walk(g.Root, func(n *graph.Node) { about[key(n.Ref)] = true })
	}
	s.w.setAbout(about)
	s.w.ensure(ctx, s.scopes(graphs))
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.Equal(b.Bytes(), s.current) {
		return
	}
	s.current = b.Bytes()
	s.version++
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// graphs builds the graph of the target, or one graph per top object of the
// namespace: each Converge object no other object's graph reaches.
func (s *Server) graphs(ctx context.Context) ([]*graph.Graph, error) {
	b := &graph.Builder{Client: s.c}
	if s.target != nil {
		g, err := b.Down(ctx, *s.target)
		if err != nil {
			return nil, err
		}
		return []*graph.Graph{g}, nil
	}
	var refs []graph.Ref
	var forbidden []string
	for _, k := range s.namespacedKinds() {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(k.GVK.GroupVersion().WithKind(k.GVK.Kind + "List"))
		if err := s.c.List(ctx, l, client.InNamespace(s.o.Namespace)); err != nil {
			if isForbidden(err) {
				forbidden = append(forbidden, k.GVK.Kind)
			}
			continue
		}
		for _, u := range l.Items {
			refs = append(refs, graph.Ref{Group: k.GVK.Group, Version: k.GVK.Version, Kind: k.GVK.Kind, Namespace: u.GetNamespace(), Name: u.GetName()})
		}
	}
	if len(refs) == 0 && len(forbidden) > 0 {
		return nil, &forbiddenError{ns: s.o.Namespace, kinds: forbidden}
	}
	s.hidden = forbidden
	reached := map[string]bool{}
	var out []*graph.Graph
	for _, r := range refs {
		if reached[key(r)] {
			continue
		}
		g, err := b.Down(ctx, r)
		if err != nil {
			return nil, err
		}
		walk(g.Root, func(n *graph.Node) {
			if n != g.Root {
				reached[key(n.Ref)] = true
			}
		})
		out = append(out, g)
	}
	// A graph built first may be below one built later.
	kept := out[:0]
	for _, g := range out {
		if !reached[key(g.Root.Ref)] {
			kept = append(kept, g)
		}
	}
	return kept, nil
}

// namespacedKinds are the namespaced Converge kinds of the graph's table
// that the API server serves.
func (s *Server) namespacedKinds() []graph.Kind {
	var out []graph.Kind
	for _, k := range graph.Kinds {
		if !strings.HasSuffix(k.GVK.Group, "converge.dev") {
			continue
		}
		m, err := s.c.RESTMapper().RESTMapping(k.GVK.GroupKind(), k.GVK.Version)
		if err != nil || m.Scope.Name() != meta.RESTScopeNameNamespace {
			continue
		}
		out = append(out, k)
	}
	return out
}

type forbiddenError struct {
	ns    string
	kinds []string
}

func (e *forbiddenError) Error() string {
	return fmt.Sprintf("Forbidden: you may not list Converge objects in namespace %s (%s)", e.ns, strings.Join(e.kinds, ", "))
}

func key(r graph.Ref) string { return r.Group + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name }

// walk visits every node below (and including) n once.
func walk(n *graph.Node, f func(*graph.Node)) {
	seen := map[*graph.Node]bool{}
	var rec func(*graph.Node)
	rec = func(n *graph.Node) {
		if seen[n] {
			return
		}
		seen[n] = true
		f(n)
		for _, e := range n.Edges {
			rec(e.Node)
		}
	}
	rec(n)
}

// scopes are the kinds and namespaces to watch: every node's own, the kinds
// its entry owns or is served by (in its namespace), the Events of its
// namespace (only those about the graph's objects count), and in namespace mode
// every Converge kind of the namespace (a new object appears).
func (s *Server) scopes(graphs []*graph.Graph) []scope {
	set := map[scope]bool{}
	if s.target == nil {
		for _, k := range s.namespacedKinds() {
			set[scope{gvk: k.GVK, ns: s.o.Namespace}] = true
		}
	} else {
		t := *s.target
		set[scope{gvk: t.GVK(), ns: t.Namespace}] = true
	}
	for _, g := range graphs {
		walk(g.Root, func(n *graph.Node) {
			if n.Status == graph.Forbidden {
				return
			}
			set[scope{gvk: n.Ref.GVK(), ns: n.Ref.Namespace}] = true
			if n.Ref.Namespace != "" {
				// A node carries its last Events: a new one is a change.
				set[scope{gvk: eventGVK, ns: n.Ref.Namespace}] = true
			}
			for _, k := range graph.Kinds {
				if k.GVK.Group != n.Ref.Group || k.GVK.Kind != n.Ref.Kind {
					continue
				}
				for _, o := range k.Owns {
					set[scope{gvk: o, ns: n.Ref.Namespace}] = true
				}
				for _, r := range k.Serves {
					set[scope{gvk: r.Kind, ns: n.Ref.Namespace}] = true
				}
			}
		})
	}
	out := make([]scope, 0, len(set))
	for sc := range set {
		out = append(out, sc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}
