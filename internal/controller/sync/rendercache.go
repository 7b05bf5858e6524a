package sync

import (
	"container/list"
	gosync "sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// DefaultRenderCacheObjects is the default bound of the render cache.
const DefaultRenderCacheObjects = 2000

var renderCacheObjects = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "converge_sync_render_cache_objects",
	Help: "Rendered objects kept in memory across all Syncs (bounded by --gitops-render-cache-objects).",
})

func init() { metrics.Registry.MustRegister(renderCacheObjects) }

// renderCache keeps the last render of each Sync, so that a drift
// correction or a status-only reconcile renders nothing, within a bound on
// the objects kept across all Syncs: the least recently used renders go
// first, the newest is always kept (a Sync larger than the bound renders
// again on each reconcile otherwise). An evicted Sync renders again on its
// next reconcile; nothing else depends on the cache.
type renderCache struct {
	mu    gosync.Mutex
	max   int
	lru   *list.List // of *renderEntry, most recently used first
	byKey map[types.NamespacedName]*list.Element
	total int
}

type renderEntry struct {
	sync      types.NamespacedName
	renderKey string
	objs      []*unstructured.Unstructured
}

func newRenderCache(maxObjects int) *renderCache {
	if maxObjects <= 0 {
		maxObjects = DefaultRenderCacheObjects
	}
	return &renderCache{max: maxObjects, lru: list.New(), byKey: map[types.NamespacedName]*list.Element{}}
}

// get returns the Sync's cached render if it was made for renderKey.
func (c *renderCache) get(sync types.NamespacedName, renderKey string) ([]*unstructured.Unstructured, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[sync]
	if !ok || el.Value.(*renderEntry).renderKey != renderKey {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*renderEntry).objs, true
}

// put records the Sync's render and evicts the least recently used others
// beyond the bound.
func (c *renderCache) put(sync types.NamespacedName, renderKey string, objs []*unstructured.Unstructured) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(sync)
	c.byKey[sync] = c.lru.PushFront(&renderEntry{sync: sync, renderKey: renderKey, objs: objs})
	c.total += len(objs)
	for c.total > c.max && c.lru.Len() > 1 {
		c.removeLocked(c.lru.Back().Value.(*renderEntry).sync)
	}
	renderCacheObjects.Set(float64(c.total))
}

// drop forgets a Sync's render (the Sync is gone).
func (c *renderCache) drop(sync types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(sync)
	renderCacheObjects.Set(float64(c.total))
}

func (c *renderCache) removeLocked(sync types.NamespacedName) {
	if el, ok := c.byKey[sync]; ok {
		c.total -= len(el.Value.(*renderEntry).objs)
		c.lru.Remove(el)
		delete(c.byKey, sync)
	}
}

// objects is the number of rendered objects kept.
func (c *renderCache) objects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
