// Package secretcache keeps the data of large Secrets out of the manager's
// shared informer cache, the memory problem cert-manager's users know well:
// a controller that watches Secrets caches every Secret of the cluster, so
// ten thousand unrelated 10 KiB Secrets (TLS bundles, Helm releases,
// kubeconfigs) cost a hundred megabytes or more.
//
// The informer keeps every Secret, whole when it is labelled Label or its
// data is at most KeepBytes (credentials and tokens: a BMC's password, a
// push webhook's token, an instance's admin password), else only its
// metadata and type: Transform strips the data (and managed fields).
// Reader wraps the cache: a Get of a stripped Secret reads it from the API
// server with the caller's own client (and budget), and keeps what it read
// in a small LRU, Data, keyed by name and resourceVersion. The cached
// metadata tells the current resourceVersion, so an unchanged Secret read
// again costs no request, and a changed one is never served staler than
// the informer itself would serve it. Secrets Converge writes and reads
// often (a Certificate's Secret, its next private key, an ACME account key,
// a Database's connection Secret) carry Label and stay fully cached.
//
// Nothing is ever written back from a stripped object: every Get through
// Reader returns the whole Secret.
package secretcache

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Label marks a Secret whose data the shared cache keeps (value "true"),
// within LabelMaxBytes per Secret and the Budget of all kept data. Converge
// sets it on the Secrets it writes and reads on every reconcile; a person may
// set it on a Secret that Converge reads often (a CA Issuer's key pair, say)
// to spare even the first read. It is a hint, not a right: any tenant can
// set it on its own Secrets, so it never makes the manager keep more than
// the Budget allows.
const Label = "converge.dev/cache-data"

// KeepBytes is the data size (keys and values) up to which an unlabelled
// Secret is cached whole (within the Budget): reading such a Secret costs
// no request, so a request nobody authenticated (a push webhook's) never
// makes one.
const KeepBytes = 1024

// LabelMaxBytes is the data size up to which a Secret labelled Label is
// cached whole: room for what Converge writes (a TLS key pair of RSA 4096
// with a chain of several certificates and its CA, a database's connection
// details, an ACME account key), never a tenant's megabyte blobs.
const LabelMaxBytes = 32 << 10

// DefaultBudgetBytes bounds the data of all Secrets the shared cache keeps
// whole: about 6,000 TLS Secrets of 5 KiB, a tenth of the chart's memory
// limit.
const DefaultBudgetBytes = 48 << 20

// Cached reports whether s's data is small enough for the shared cache to
// keep it (before the Budget is consulted).
func Cached(s *corev1.Secret) bool {
	n := size(s.Data)
	return n <= KeepBytes || (s.Labels[Label] == "true" && n <= LabelMaxBytes)
}

func size(data map[string][]byte) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

// Budget bounds the Secret data the shared cache keeps in all: its
// Transform keeps a Cached Secret whole only while the data of every Secret
// it keeps fits in the budget, first come first kept, and strips the rest
// (they are read through Reader and its LRU, as any large Secret). Forget,
// called when the informer deletes a Secret, gives its bytes back. It is
// safe for concurrent use.
type Budget struct {
	mu    sync.Mutex
	max   int
	used  int
	sizes map[types.NamespacedName]int
}

// NewBudget returns a Budget of maxBytes of Secret data (keys and values);
// maxBytes < 0 means no bound.
func NewBudget(maxBytes int) *Budget {
	return &Budget{max: maxBytes, sizes: map[types.NamespacedName]int{}}
}

// Used is the data kept, in bytes.
func (b *Budget) Used() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// keep reports whether a Secret of n bytes at key may be kept, and records
// it; a Secret that may not is forgotten (its earlier version's bytes freed).
func (b *Budget) keep(key types.NamespacedName, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := b.sizes[key]
	if b.max >= 0 && b.used-prev+n > b.max {
		delete(b.sizes, key)
		b.used -= prev
		return false
	}
	b.sizes[key] = n
	b.used += n - prev
	return true
}

// Forget gives back the bytes of a deleted Secret (obj is a *corev1.Secret
// or a cache tombstone of one); other objects are ignored.
func (b *Budget) Forget(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	b.drop(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
}

func (b *Budget) drop(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= b.sizes[key]
	delete(b.sizes, key)
}

// Transform strips the data of Secrets not Cached, or beyond the Budget,
// before the informer stores them, with kubectl's last-applied-configuration
// annotation (a copy of the data when the Secret was applied with kubectl),
// and the managed fields of every Secret (as the manager's default transform
// does for other kinds). Other objects pass unchanged.
//
// It strips the decoded Secret in place, as client-go allows (a transform
// sees an object nobody else holds yet), rather than copying it into a new
// one: one Secret struct allocated per watch event instead of two. It is
// idempotent: a stripped Secret has no data left to strip.
func (b *Budget) Transform(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	s.ManagedFields = nil
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	if Cached(s) && b.keep(key, len(key.Namespace)+len(key.Name)+size(s.Data)) {
		return s, nil
	}
	b.drop(key) // frees what an earlier version held
	s.Data, s.StringData = nil, nil
	delete(s.Annotations, corev1.LastAppliedConfigAnnotation)
	return s, nil
}

// DefaultDataBytes bounds the Secret data Reader keeps by default.
const DefaultDataBytes = 8 << 20

// Data is the LRU of Secrets read from the API server, shared by every
// Reader of a manager. It is safe for concurrent use.
type Data struct {
	mu    sync.Mutex
	max   int
	bytes int
	order *list.List // of *entry, most recently used first
	byKey map[types.NamespacedName]*list.Element
}

type entry struct {
	key    types.NamespacedName
	secret *corev1.Secret
	size   int
}

// NewData returns an LRU that keeps at most maxBytes of Secret data (keys
// and values); a single larger Secret is not kept at all.
func NewData(maxBytes int) *Data {
	return &Data{max: maxBytes, order: list.New(), byKey: map[types.NamespacedName]*list.Element{}}
}

// get returns a copy of the Secret kept for key at resourceVersion rv.
func (d *Data) get(key types.NamespacedName, rv string) (*corev1.Secret, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	el, ok := d.byKey[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry) //nolint:forcetypeassert // the list holds only *entry
	if e.secret.ResourceVersion != rv {
		return nil, false
	}
	d.order.MoveToFront(el)
	return e.secret.DeepCopy(), true
}

// put keeps a copy of s, evicting the least recently used beyond the bound.
func (d *Data) put(s *corev1.Secret) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	n := len(key.Namespace) + len(key.Name) + size(s.Data)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.remove(key)
	if n > d.max {
		return
	}
	d.byKey[key] = d.order.PushFront(&entry{key: key, secret: s.DeepCopy(), size: n})
	d.bytes += n
	for d.bytes > d.max {
		d.remove(d.order.Back().Value.(*entry).key) //nolint:forcetypeassert // the list holds only *entry
	}
}

func (d *Data) remove(key types.NamespacedName) {
	el, ok := d.byKey[key]
	if !ok {
		return
	}
	d.bytes -= el.Value.(*entry).size //nolint:forcetypeassert // the list holds only *entry
	d.order.Remove(el)
	delete(d.byKey, key)
}

// Len is the number of Secrets kept.
func (d *Data) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.byKey)
}

// Bytes is the size of the data kept.
func (d *Data) Bytes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bytes
}

// Reader is a cache.Cache whose Get of a Secret not fully cached returns
// the whole Secret: from Data when the cache's resourceVersion matches,
// else read with Live (and kept in Data). A list of Secrets is read with
// Live. Everything else is the cache's.
type Reader struct {
	cache.Cache
	// Live reads from the API server, with the caller's budget.
	Live client.Reader
	// Data keeps what Live read.
	Data *Data
	// Budget bounds the data the cache keeps whole (informational: its
	// Transform is the cache's).
	Budget *Budget
}

// Get implements client.Reader.
func (r *Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return r.Cache.Get(ctx, key, obj, opts...)
	}
	if err := r.Cache.Get(ctx, key, s, opts...); err != nil {
		return err
	}
	if len(s.Data) > 0 {
		return nil // cached whole (a stripped Secret has no data)
	}
	if kept, ok := r.Data.get(key, s.ResourceVersion); ok {
		*s = *kept
		return nil
	}
	live := &corev1.Secret{}
	if err := r.Live.Get(ctx, key, live); err != nil {
		return fmt.Errorf("reading Secret %s (its data is not cached): %w", key, err)
	}
	r.Data.put(live)
	*s = *live
	return nil
}

// With returns a Reader on the same cache and Data that reads with live:
// each controller reads with its own client, so its reads spend its own
// budget.
func (r *Reader) With(live client.Reader) *Reader {
	return &Reader{Cache: r.Cache, Live: live, Data: r.Data, Budget: r.Budget}
}

// List implements client.Reader: a SecretList is read from the API server,
// so no caller ever sees stripped Secrets.
func (r *Reader) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if _, ok := l.(*corev1.SecretList); ok {
		return r.Live.List(ctx, l, opts...)
	}
	return r.Cache.List(ctx, l, opts...)
}
