package sync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	gosync "sync"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

const (
	driftCorrected = "Corrected"
	driftReported  = "Reported"
)

// driftWatcher watches, metadata only, every kind found in an inventory, in
// a cache of its own restricted to objects labelled by a Sync. When another
// field manager changes or deletes an applied object it queues the owning
// Sync at once; the Sync then finds that object's live resourceVersion no
// longer matches its record and corrects or reports it.
type driftWatcher struct {
	cache cache.Cache
	ctrl  controller.Controller
	r     *Reconciler

	mu      gosync.Mutex
	watched map[schema.GroupVersionKind]bool
}

func newDriftWatcher(mgr ctrl.Manager, c controller.Controller) (*driftWatcher, error) {
	req, err := labels.NewRequirement(gitopsv1alpha1.SyncNameLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	ca, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: labels.NewSelector().Add(*req),
		DefaultTransform:     compactManagedFields,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the drift cache: %w", err)
	}
	if err := mgr.Add(ca); err != nil {
		return nil, err
	}
	return &driftWatcher{cache: ca, ctrl: c, watched: map[schema.GroupVersionKind]bool{}}, nil
}

// compactManagedFields keeps of each object only what lookups and the
// drift handler read: name, namespace, resourceVersion, deletion timestamp,
// the two ownership labels and, of each managedFields entry, the manager,
// operation, subresource, time and a digest of the field set (the sets are
// most of an object's metadata: 10,000 objects would otherwise cost tens of
// MiB). Repeated strings (namespaces, managers, label values) are interned,
// and the label map is shared by every object of one Sync.
func compactManagedFields(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: intern(m.APIVersion), Kind: intern(m.Kind)}}
	out.Name, out.Namespace, out.ResourceVersion = m.Name, intern(m.Namespace), m.ResourceVersion
	out.DeletionTimestamp = m.DeletionTimestamp
	out.Labels = ownershipLabels(m.Labels)
	if len(m.ManagedFields) > 0 {
		out.ManagedFields = make([]metav1.ManagedFieldsEntry, len(m.ManagedFields))
	}
	for i, mf := range m.ManagedFields {
		e := metav1.ManagedFieldsEntry{Manager: intern(mf.Manager), Operation: metav1.ManagedFieldsOperationType(intern(string(mf.Operation))),
			Subresource: intern(mf.Subresource), Time: mf.Time}
		if f := mf.FieldsV1; f != nil {
			h := sha256.Sum256(f.GetRawBytes())
			e.FieldsV1 = metav1.NewFieldsV1(`"` + hex.EncodeToString(h[:8]) + `"`)
		}
		out.ManagedFields[i] = e
	}
	return out, nil
}

func intern(s string) string { return unique.Make(s).Value() }

// sharedLabels holds one ownership label map per Sync, shared (read-only)
// by every cached object of that Sync.
var sharedLabels gosync.Map // "namespace/name" -> map[string]string

func ownershipLabels(l map[string]string) map[string]string {
	name, hasName := l[gitopsv1alpha1.SyncNameLabel]
	ns, hasNS := l[gitopsv1alpha1.SyncNamespaceLabel]
	if !hasName && !hasNS {
		return nil
	}
	if !hasName || !hasNS {
		out := map[string]string{}
		if hasName {
			out[gitopsv1alpha1.SyncNameLabel] = intern(name)
		}
		if hasNS {
			out[gitopsv1alpha1.SyncNamespaceLabel] = intern(ns)
		}
		return out
	}
	key := ns + "/" + name
	if v, ok := sharedLabels.Load(key); ok {
		return v.(map[string]string)
	}
	v, _ := sharedLabels.LoadOrStore(key, map[string]string{gitopsv1alpha1.SyncNameLabel: intern(name), gitopsv1alpha1.SyncNamespaceLabel: intern(ns)})
	return v.(map[string]string)
}

// ensure starts watching the kinds of refs not yet watched.
func (d *driftWatcher) ensure(refs []gitopsv1alpha1.ObjectRef) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ref := range refs {
		gvk := gvkOf(ref)
		if d.watched[gvk] {
			continue
		}
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		src := source.Kind(d.cache, obj, handler.TypedFuncs[*metav1.PartialObjectMetadata, reconcile.Request]{
			CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*metav1.PartialObjectMetadata], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				// The informer's first list: an object someone else already
				// wrote to may have drifted before the watch started.
				if writtenByOthers(e.Object) {
					d.enqueue(e.Object, gvk, q)
				}
			},
			UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*metav1.PartialObjectMetadata], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if changedByOthers(e.ObjectOld, e.ObjectNew) {
					d.enqueue(e.ObjectNew, gvk, q)
				}
			},
			DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*metav1.PartialObjectMetadata], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				d.enqueue(e.Object, gvk, q)
			},
		})
		if err := d.ctrl.Watch(src); err != nil {
			return fmt.Errorf("watching %s: %w", gvk, err)
		}
		d.watched[gvk] = true
	}
	return nil
}

func (d *driftWatcher) enqueue(o *metav1.PartialObjectMetadata, gvk schema.GroupVersionKind, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	name, ns := o.Labels[gitopsv1alpha1.SyncNameLabel], o.Labels[gitopsv1alpha1.SyncNamespaceLabel]
	if name == "" || ns == "" {
		return
	}
	key := types.NamespacedName{Namespace: ns, Name: name}
	if d.r != nil {
		d.r.state(key).sawDrift(objKey{Group: gvk.Group, Kind: gvk.Kind, Namespace: o.Namespace, Name: o.Name}, time.Now())
	}
	q.Add(reconcile.Request{NamespacedName: key})
}

// lookup returns the cached metadata of an applied object, if watched and
// present.
func (d *driftWatcher) lookup(ref gitopsv1alpha1.ObjectRef) (*metav1.PartialObjectMetadata, bool) {
	d.mu.Lock()
	watched := d.watched[gvkOf(ref)]
	d.mu.Unlock()
	if !watched {
		return nil, false
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvkOf(ref))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) //nolint:forbidigo // a cache read never blocks long; bounded
	defer cancel()
	if err := d.cache.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, m); err != nil {
		return nil, false
	}
	return m, true
}

// changedByOthers reports whether an update came from a writer other than
// the Sync field manager, outside the status subresource (controllers
// updating status are not drift).
func changedByOthers(old, cur *metav1.PartialObjectMetadata) bool {
	if old.ResourceVersion == cur.ResourceVersion {
		return false // resync
	}
	prev := map[string]metav1.ManagedFieldsEntry{}
	for _, mf := range old.ManagedFields {
		prev[mf.Manager+"|"+string(mf.Operation)+"|"+mf.Subresource] = mf
	}
	for _, mf := range cur.ManagedFields {
		if mf.Manager == FieldManager || mf.Subresource != "" {
			continue
		}
		p, ok := prev[mf.Manager+"|"+string(mf.Operation)+"|"+mf.Subresource]
		if !ok || !timeEqual(p.Time, mf.Time) || !fieldsEqual(p.FieldsV1, mf.FieldsV1) {
			return true
		}
	}
	// Labels or annotations we set may have been removed by a writer whose
	// entry did not change otherwise.
	return !slices.Equal(managerNames(old.ManagedFields), managerNames(cur.ManagedFields))
}

func writtenByOthers(o *metav1.PartialObjectMetadata) bool {
	for _, mf := range o.ManagedFields {
		if mf.Manager != FieldManager && mf.Subresource == "" {
			return true
		}
	}
	return false
}

func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

func fieldsEqual(a, b *metav1.FieldsV1) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.GetRawBytes(), b.GetRawBytes())
}

func managerNames(mfs []metav1.ManagedFieldsEntry) []string {
	out := make([]string, 0, len(mfs))
	for _, mf := range mfs {
		out = append(out, mf.Manager+"|"+mf.Subresource)
	}
	slices.Sort(out)
	return out
}

// addDrift records a drift on the scope, in status and in metrics.
func (s *scope) addDrift(ref gitopsv1alpha1.ObjectRef, managers, fields []string, action string) {
	sy := s.sync
	now := metav1.NewTime(s.now)
	d := gitopsv1alpha1.DriftedObject{Object: ref, FieldManagers: managers[:min(len(managers), 8)],
		Fields: fields[:min(len(fields), 16)], Action: action, Time: now}
	s.changes.mu.Lock()
	defer s.changes.mu.Unlock()
	s.drifts = append(s.drifts, d)
	if sy.Status.Drift == nil {
		sy.Status.Drift = &gitopsv1alpha1.DriftStatus{}
	}
	sy.Status.Drift.Count++
	sy.Status.Drift.LastDetected = &now
	sy.Status.Drift.Objects = append([]gitopsv1alpha1.DriftedObject{d}, sy.Status.Drift.Objects...)
	if len(sy.Status.Drift.Objects) > 10 {
		sy.Status.Drift.Objects = sy.Status.Drift.Objects[:10]
	}
	driftTotal.WithLabelValues(sy.Namespace, sy.Name, action).Inc()
}
