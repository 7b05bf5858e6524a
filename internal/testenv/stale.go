package testenv

import (
	"context"
	"reflect"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StaleClient is a client whose reads of chosen objects answer as a
// manager's cache behind the API server does: a pinned object reads as an
// earlier copy (until a deadline, or for good), a hidden one as NotFound.
// Every other read, and every write, is the wrapped client's. Tests use it
// to put a controller in front of a stale cache deterministically, instead
// of hoping an informer lags. It is safe for concurrent use.
type StaleClient struct {
	client.Client

	mu     sync.Mutex
	pinned map[staleKey]pinnedCopy
	hidden map[staleKey]bool
}

type staleKey struct {
	typ reflect.Type
	key client.ObjectKey
}

type pinnedCopy struct {
	obj   client.Object
	until time.Time // zero: for good
}

// NewStaleClient wraps c.
func NewStaleClient(c client.Client) *StaleClient {
	return &StaleClient{Client: c, pinned: map[staleKey]pinnedCopy{}, hidden: map[staleKey]bool{}}
}

func keyOf(obj client.Object, key client.ObjectKey) staleKey {
	return staleKey{typ: reflect.TypeOf(obj), key: key}
}

// Pin makes a Get of obj's kind and key answer with a copy of obj until
// until (zero: until Unpin).
func (c *StaleClient) Pin(obj client.Object, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pinned[keyOf(obj, client.ObjectKeyFromObject(obj))] = pinnedCopy{obj: obj.DeepCopyObject().(client.Object), until: until}
}

// Unpin lets Gets of obj's kind and key through again.
func (c *StaleClient) Unpin(obj client.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pinned, keyOf(obj, client.ObjectKeyFromObject(obj)))
}

// Hide makes a Get of obj's kind and key NotFound, whatever the API
// server holds: an object the cache has not seen yet.
func (c *StaleClient) Hide(obj client.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hidden[keyOf(obj, client.ObjectKeyFromObject(obj))] = true
}

// Get answers pinned and hidden objects as described on StaleClient.
func (c *StaleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	k := keyOf(obj, key)
	c.mu.Lock()
	p, pinned := c.pinned[k]
	hidden := c.hidden[k]
	c.mu.Unlock()
	if pinned && (p.until.IsZero() || time.Now().Before(p.until)) {
		// Same concrete type (the key includes it): copy the pinned
		// object's value into obj.
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(p.obj.DeepCopyObject()).Elem())
		return nil
	}
	if hidden {
		return apierrors.NewNotFound(schema.GroupResource{Resource: reflect.TypeOf(obj).Elem().Name()}, key.Name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}
