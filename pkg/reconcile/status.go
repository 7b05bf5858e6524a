package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// StatusPatcher writes the status a reconcile computed, once, at its end.
// Take it right after reading the object ([NewStatusPatcher]) and call
// [StatusPatcher.Patch] in a defer.
//
// Patch sends nothing when the status did not change. Otherwise it sends a
// merge patch of the status subresource locked on the object's
// resourceVersion. When another writer changed the object in between (a
// conflict), it reads the object again and re-applies only what this
// reconcile changed: the status fields it changed, and the conditions it
// set or removed, merged by type — a condition another controller owns on
// the same object survives. It gives up after a few conflicts and returns
// the error, so the reconcile is retried.
//
// A StatusPatcher may be used for several writes in one reconcile (a
// write-ahead record before a side effect, then the final status): each
// successful Patch becomes the base of the next.
type StatusPatcher struct {
	c client.Client
	// reader re-reads the object after a conflict: c unless
	// ReadConflictsFrom says otherwise.
	reader client.Reader
	before map[string]any
	err    error
}

// NewStatusPatcher remembers obj's status as the reconcile read it.
func NewStatusPatcher(c client.Client, obj client.Object) *StatusPatcher {
	p := &StatusPatcher{c: c, reader: c}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		p.err = fmt.Errorf("reading the status of %T: %w", obj, err)
		return p
	}
	p.before = statusOf(u)
	return p
}

// ReadConflictsFrom makes the patcher re-read the object from r after a
// conflict, e.g. the manager's API reader: a controller whose re-applied
// change depends on the object as stored (a counter, a correction its last
// write made) must not take the base from a cache that has not seen that
// write yet. It returns p.
func (p *StatusPatcher) ReadConflictsFrom(r client.Reader) *StatusPatcher {
	p.reader = r
	return p
}

// PatchOnReturn is Patch for a deferred call: it joins Patch's error into
// *errp, so that a reconcile writes its status on every return, in one line
// placed right after it read obj (the patcher's arguments are evaluated
// there, its Patch when the function returns):
//
//	defer reconcile.NewStatusPatcher(r.Client, obj).PatchOnReturn(ctx, obj, &retErr)
func (p *StatusPatcher) PatchOnReturn(ctx context.Context, obj client.Object, errp *error) {
	*errp = errors.Join(*errp, p.Patch(ctx, obj))
}

// Patch writes obj's status if it differs from what was read; see
// [StatusPatcher]. On success obj holds the object the API server returned
// (its resourceVersion and full status). An object that no longer exists is
// not an error: there is no status left to report.
func (p *StatusPatcher) Patch(ctx context.Context, obj client.Object) error {
	if p.err != nil {
		return p.err
	}
	afterObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("reading the status of %T: %w", obj, err)
	}
	after := statusOf(afterObj)
	if equality.Semantic.DeepEqual(p.before, after) {
		return nil
	}
	change, err := diffStatus(p.before, after)
	if err != nil {
		return err
	}

	// The first attempt's base is the object as read, at the newest
	// resourceVersion this reconcile knows (its own finalizer patches move
	// it on).
	base := &unstructured.Unstructured{Object: afterObj}
	base.Object["status"] = runtime.DeepCopyJSONValue(p.before)
	if p.before == nil {
		delete(base.Object, "status")
	}
	gvk, err := apiutil.GVKForObject(obj, p.c.Scheme())
	if err != nil {
		return fmt.Errorf("patching the status of %T: %w", obj, err)
	}
	first := true
	var sent *unstructured.Unstructured
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !first {
			fresh, ok := obj.DeepCopyObject().(client.Object)
			if !ok {
				return fmt.Errorf("%T does not copy into a client.Object", obj)
			}
			if err := p.reader.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
				return err
			}
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(fresh)
			if err != nil {
				return err
			}
			base = &unstructured.Unstructured{Object: u}
		}
		first = false
		target, err := change.applyTo(base)
		if err != nil {
			return err
		}
		target.SetGroupVersionKind(gvk)
		from := base.DeepCopy()
		from.SetGroupVersionKind(gvk)
		if err := p.c.Status().Patch(ctx, target, client.MergeFromWithOptions(from, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		sent = target
		return nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patching the status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sent.Object, obj); err != nil {
		return fmt.Errorf("reading back the status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	// The object as written is the base of a later Patch.
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	p.before = statusOf(u)
	return nil
}

// statusChange is what one reconcile changed in a status: a JSON merge
// patch of every field but the conditions, and the conditions it set or
// removed, by type.
type statusChange struct {
	fields  []byte
	set     map[string]any
	order   []string
	removed map[string]bool
}

func diffStatus(before, after map[string]any) (*statusChange, error) {
	bRest, bConds := splitConditions(before)
	aRest, aConds := splitConditions(after)
	bj, err := json.Marshal(bRest)
	if err != nil {
		return nil, err
	}
	aj, err := json.Marshal(aRest)
	if err != nil {
		return nil, err
	}
	fields, err := jsonpatch.CreateMergePatch(bj, aj)
	if err != nil {
		return nil, fmt.Errorf("diffing status: %w", err)
	}
	ch := &statusChange{fields: fields, set: map[string]any{}, removed: map[string]bool{}}
	for _, t := range aConds.order {
		if c, ok := bConds.byType[t]; !ok || !equality.Semantic.DeepEqual(c, aConds.byType[t]) {
			ch.set[t] = aConds.byType[t]
			ch.order = append(ch.order, t)
		}
	}
	for _, t := range bConds.order {
		if _, ok := aConds.byType[t]; !ok {
			ch.removed[t] = true
		}
	}
	return ch, nil
}

// applyTo returns base with the change applied to its status.
func (ch *statusChange) applyTo(base *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	target := base.DeepCopy()
	rest, conds := splitConditions(statusOf(target.Object))
	rj, err := json.Marshal(rest)
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(rj, ch.fields)
	if err != nil {
		return nil, fmt.Errorf("applying the status change: %w", err)
	}
	status := map[string]any{}
	if err := json.Unmarshal(merged, &status); err != nil {
		return nil, err
	}
	var list []any
	for _, t := range conds.order {
		if ch.removed[t] {
			continue
		}
		if c, ok := ch.set[t]; ok {
			list = append(list, runtime.DeepCopyJSONValue(c))
			continue
		}
		list = append(list, conds.byType[t])
	}
	for _, t := range ch.order {
		if _, ok := conds.byType[t]; !ok {
			list = append(list, runtime.DeepCopyJSONValue(ch.set[t]))
		}
	}
	if len(list) > 0 {
		status["conditions"] = list
	}
	target.Object["status"] = status
	return target, nil
}

type conditionList struct {
	order  []string
	byType map[string]any
}

// splitConditions separates .status.conditions from the other status
// fields. Entries without a string type are kept under "" so nothing is
// lost.
func splitConditions(status map[string]any) (map[string]any, conditionList) {
	rest := map[string]any{}
	cl := conditionList{byType: map[string]any{}}
	for k, v := range status {
		if k != "conditions" {
			rest[k] = v
			continue
		}
		items, _ := v.([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			t, _ := m["type"].(string)
			if _, dup := cl.byType[t]; !dup {
				cl.order = append(cl.order, t)
			}
			cl.byType[t] = it
		}
	}
	return rest, cl
}

func statusOf(u map[string]any) map[string]any {
	s, _ := u["status"].(map[string]any)
	if s == nil {
		return nil
	}
	out, _ := runtime.DeepCopyJSONValue(s).(map[string]any)
	return out
}
