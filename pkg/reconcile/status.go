package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
	// before is the JSON of the status as read or last written.
	before []byte
	err    error
}

// NewStatusPatcher remembers obj's status as the reconcile read it.
func NewStatusPatcher(c client.Client, obj client.Object) *StatusPatcher {
	p := &StatusPatcher{c: c, reader: c}
	p.before, p.err = statusJSON(obj)
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
//
// The patch is computed from the typed object's JSON (no unstructured
// copy of it): a status as large as a Sync's inventory costs one encoding
// per write and per read, and the patch carries only the status fields
// that changed.
func (p *StatusPatcher) Patch(ctx context.Context, obj client.Object) error {
	if p.err != nil {
		return p.err
	}
	after, err := statusJSON(obj)
	if err != nil {
		return err
	}
	data, err := p.patchData(obj, after)
	if err != nil || data == nil {
		return err
	}
	err = p.c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, data))
	if apierrors.IsConflict(err) {
		err = p.reapply(ctx, obj, after)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patching the status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	// The object as written is the base of a later Patch.
	p.before, err = statusJSON(obj)
	return err
}

// patchData is the first attempt's patch: the status fields that changed
// since p.before, locked on obj's resourceVersion (the newest this
// reconcile knows: its own finalizer patches move it on). It is nil when
// the status did not change.
func (p *StatusPatcher) patchData(obj client.Object, after []byte) ([]byte, error) {
	if bytes.Equal(p.before, after) {
		return nil, nil
	}
	change, err := mergePatch(p.before, after)
	if err != nil {
		return nil, fmt.Errorf("diffing the status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	if change == nil {
		return nil, nil
	}
	rv := obj.GetResourceVersion()
	if rv == "" {
		return nil, fmt.Errorf("patching the status of %s: no resourceVersion to lock on", client.ObjectKeyFromObject(obj))
	}
	return json.Marshal(lockedStatusPatch{Metadata: lockedMeta{ResourceVersion: rv}, Status: change})
}

type lockedStatusPatch struct {
	Metadata lockedMeta      `json:"metadata"`
	Status   json.RawMessage `json:"status"`
}

type lockedMeta struct {
	ResourceVersion string `json:"resourceVersion"`
}

// reapply is Patch after a conflict: it reads the object again and applies
// to it only what this reconcile changed (after, against p.before), with
// the fields merged and the conditions merged by type, until a write
// succeeds or the conflicts go on for too long. On success obj holds what
// the server returned.
func (p *StatusPatcher) reapply(ctx context.Context, obj client.Object, after []byte) error {
	var before, now map[string]any
	if err := json.Unmarshal(p.before, &before); err != nil {
		return fmt.Errorf("reading the status of %T: %w", obj, err)
	}
	if err := json.Unmarshal(after, &now); err != nil {
		return fmt.Errorf("reading the status of %T: %w", obj, err)
	}
	change, err := diffStatus(before, now)
	if err != nil {
		return err
	}
	gvk, err := apiutil.GVKForObject(obj, p.c.Scheme())
	if err != nil {
		return fmt.Errorf("patching the status of %T: %w", obj, err)
	}
	var sent *unstructured.Unstructured
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
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
		base := &unstructured.Unstructured{Object: u}
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
	if err != nil {
		return err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sent.Object, obj); err != nil {
		return fmt.Errorf("reading back the status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// statusJSON is the JSON of obj's .status ("null" when it has none): the
// field tagged json:"status" of a typed object, or .status of an
// unstructured one.
func statusJSON(obj client.Object) ([]byte, error) {
	if u, ok := obj.(runtime.Unstructured); ok {
		b, err := json.Marshal(u.UnstructuredContent()["status"])
		if err != nil {
			return nil, fmt.Errorf("reading the status of %T: %w", obj, err)
		}
		return b, nil
	}
	v := reflect.ValueOf(obj)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, fmt.Errorf("reading the status of %T: nil object", obj)
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("reading the status of %T: not a struct", obj)
	}
	t := v.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "status" {
			continue
		}
		b, err := json.Marshal(v.Field(i).Interface())
		if err != nil {
			return nil, fmt.Errorf("reading the status of %T: %w", obj, err)
		}
		return b, nil
	}
	return []byte("null"), nil
}

// mergePatch is a JSON merge patch (RFC 7386) from the status before to
// the status after, or nil when they are equal. Top-level fields are
// compared as encoded: an unchanged field, however large (an inventory),
// is neither decoded nor sent; a changed object is diffed, anything else
// sent whole.
func mergePatch(before, after []byte) (json.RawMessage, error) {
	var b, a map[string]json.RawMessage
	if err := json.Unmarshal(before, &b); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(after, &a); err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for k, av := range a {
		bv, ok := b[k]
		switch {
		case ok && bytes.Equal(bv, av):
		case ok && isObject(bv) && isObject(av):
			sub, err := jsonpatch.CreateMergePatch(bv, av)
			if err != nil {
				return nil, err
			}
			if string(sub) != "{}" {
				out[k] = sub
			}
		default:
			out[k] = av
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out[k] = json.RawMessage("null")
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return json.Marshal(out)
}

func isObject(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
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
