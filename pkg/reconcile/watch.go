package reconcile

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// KindWatcher starts a controller's watch on a kind it learns about only at
// run time, once per kind, as unstructured objects through the manager's
// cache: a kind named by a reference in the spec (apiVersion and kind of a
// provider object that implements a written API contract), whose Go type the
// controller does not import. Take one in SetupWithManager, from the
// controller.Controller that Build returns, and call [KindWatcher.Watch]
// from Reconcile when a reference names a kind. Safe for concurrent
// reconciles.
type KindWatcher struct {
	ctrl    controller.Controller
	cache   cache.Cache
	mapFunc handler.MapFunc

	mu      sync.Mutex
	watched map[schema.GroupVersionKind]bool
}

// NewKindWatcher returns a watcher that adds watches to c from cache, each
// queueing the requests mapFunc returns for a changed object (typically the
// objects that reference it).
func NewKindWatcher(c controller.Controller, cache cache.Cache, mapFunc handler.MapFunc) *KindWatcher {
	return &KindWatcher{ctrl: c, cache: cache, mapFunc: mapFunc, watched: map[schema.GroupVersionKind]bool{}}
}

// Watch starts watching gvk unless it is watched already.
func (w *KindWatcher) Watch(gvk schema.GroupVersionKind) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched[gvk] {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := w.ctrl.Watch(source.Kind(w.cache, client.Object(u), handler.EnqueueRequestsFromMapFunc(w.mapFunc))); err != nil {
		return fmt.Errorf("watching %s: %w", gvk, err)
	}
	w.watched[gvk] = true
	return nil
}
