package ui

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// scope is one kind in one namespace ("" for a cluster-scoped kind).
type scope struct {
	gvk schema.GroupVersionKind
	ns  string
}

func (s scope) String() string { return s.gvk.String() + "@" + s.ns }

// watcher keeps one watch per scope, made with the caller's identity, and
// signals changed on every change any of them sees. A scope the caller may
// not watch is dropped (its objects show as Forbidden); others are restarted
// when the server ends them.
type watcher struct {
	dyn     dynamic.Interface
	mapper  meta.RESTMapper
	changed chan struct{}

	// about holds the keys (graph.Ref without version) of the graph's
	// objects: an Event is a change only when its involvedObject is one
	// of them.
	about atomic.Pointer[map[string]bool]

	mu      sync.Mutex
	running map[scope]context.CancelFunc
	refused map[scope]bool
	wg      sync.WaitGroup
}

func newWatcher(cfg *rest.Config, mapper meta.RESTMapper) (*watcher, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("ui: building a dynamic client: %w", err)
	}
	return &watcher{dyn: dyn, mapper: mapper, changed: make(chan struct{}, 1),
		running: map[scope]context.CancelFunc{}, refused: map[scope]bool{}}, nil
}

func (w *watcher) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// ensure runs exactly the watches of scopes: new ones start, ones no longer
// needed stop.
func (w *watcher) ensure(ctx context.Context, scopes []scope) {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[scope]bool{}
	for _, sc := range scopes {
		want[sc] = true
		if _, ok := w.running[sc]; ok || w.refused[sc] {
			continue
		}
		m, err := w.mapper.RESTMapping(sc.gvk.GroupKind(), sc.gvk.Version)
		if err != nil {
			w.refused[sc] = true // a kind the API server does not serve
			continue
		}
		var ri dynamic.ResourceInterface = w.dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = w.dyn.Resource(m.Resource).Namespace(sc.ns)
		}
		wctx, cancel := context.WithCancel(ctx)
		w.running[sc] = cancel
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.run(wctx, sc, ri)
		}()
	}
	for sc, cancel := range w.running {
		if !want[sc] {
			cancel()
			delete(w.running, sc)
		}
	}
}

// run lists (for a resource version, one object) and watches from there,
// again after the server ends a watch; a Forbidden or unserved scope ends
// it for good.
func (w *watcher) run(ctx context.Context, sc scope, ri dynamic.ResourceInterface) {
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		l, err := ri.List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			var wi watch.Interface
			wi, err = ri.Watch(ctx, metav1.ListOptions{ResourceVersion: l.GetResourceVersion(), AllowWatchBookmarks: true})
			if err == nil {
				if !first {
					w.signal() // something may have changed while no watch ran
				}
				first = false
				backoff = 100 * time.Millisecond
				err = w.drain(ctx, sc, wi)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
			w.mu.Lock()
			w.refused[sc] = true
			if cancel, ok := w.running[sc]; ok {
				cancel()
				delete(w.running, sc)
			}
			w.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

var errWatchEnded = errors.New("watch ended")

// eventGVK is the kind of the Events watched for the graph's objects.
var eventGVK = schema.GroupVersionKind{Version: "v1", Kind: "Event"}

// setAbout records the keys of the objects whose Events are changes.
func (w *watcher) setAbout(keys map[string]bool) { w.about.Store(&keys) }

// relevant is false for an Event about an object outside the graph: the
// namespace's other Events do not rebuild it.
func (w *watcher) relevant(sc scope, obj runtime.Object) bool {
	if sc.gvk != eventGVK {
		return true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return true
	}
	about := w.about.Load()
	if about == nil {
		return false
	}
	io, _, _ := unstructured.NestedStringMap(u.Object, "involvedObject")
	gv, _ := schema.ParseGroupVersion(io["apiVersion"])
	return (*about)[gv.Group+"/"+io["kind"]+"/"+io["namespace"]+"/"+io["name"]]
}

// drain signals a change for each event until the watch ends; on a watch
// of Events, only for an Event about an object of the graph.
func (w *watcher) drain(ctx context.Context, sc scope, wi watch.Interface) error {
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return errWatchEnded
			}
			switch ev.Type {
			case watch.Bookmark:
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			default:
				if w.relevant(sc, ev.Object) {
					w.signal()
				}
			}
		}
	}
}

// stop ends every watch and waits for them.
func (w *watcher) stop() {
	w.mu.Lock()
	for sc, cancel := range w.running {
		cancel()
		delete(w.running, sc)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
