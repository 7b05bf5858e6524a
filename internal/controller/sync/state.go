package sync

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	gosync "sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// objKey identifies an object independently of its version.
type objKey struct {
	Group, Kind, Namespace, Name string
}

// keyOf is the key of a reference. Group, kind and namespace repeat across
// thousands of records and are interned.
func keyOf(r gitopsv1alpha1.ObjectRef) objKey {
	return objKey{Group: intern(r.Group), Kind: intern(r.Kind), Namespace: intern(r.Namespace), Name: r.Name}
}

func refOf(u *unstructured.Unstructured) gitopsv1alpha1.ObjectRef {
	gvk := u.GroupVersionKind()
	return gitopsv1alpha1.ObjectRef{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

func gvkOf(r gitopsv1alpha1.ObjectRef) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
}

func refString(r gitopsv1alpha1.ObjectRef) string {
	gk := r.Kind
	if r.Group != "" {
		gk += "." + r.Group
	}
	if r.Namespace == "" {
		return gk + "/" + r.Name
	}
	return gk + "/" + r.Namespace + "/" + r.Name
}

func sortRefs(refs []gitopsv1alpha1.ObjectRef) {
	sort.Slice(refs, func(i, j int) bool { return refString(refs[i]) < refString(refs[j]) })
}

// record is what the controller last applied to one object: the digest of
// the desired state and the resourceVersion the apply returned. While both
// hold, the object is unchanged and costs no request.
type record struct {
	hash digest
	rv   string
}

// digest is the first 16 bytes of a SHA-256, kept as bytes (not hex) in
// every record.
type digest [16]byte

// syncState is one Sync's in-memory state. It is a cache: after a restart it
// is empty and rebuilt by the first apply; status.inventory is the truth.
type syncState struct {
	mu gosync.Mutex
	// records by object.
	records map[objKey]record
	// waitSince is when waiting for health started, by revision.
	waitRevision string
	waitSince    time.Time
	// driftSeen is when a watch saw an object change, for the latency metric.
	driftSeen map[objKey]time.Time
	// identity is the user the records were applied as ("" for the
	// manager).
	identity string
	// leaksScanned: this manager has looked for the Sync's leaked objects
	// (recoverLeaked) once.
	leaksScanned bool
}

// scanLeaks reports whether the leak scan is still to do, and marks it
// done.
func (st *syncState) scanLeaks() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	todo := !st.leaksScanned
	st.leaksScanned = true
	return todo
}

// rescanLeaks makes the next prune scan again (the scan failed).
func (st *syncState) rescanLeaks() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.leaksScanned = false
}

func newSyncState() *syncState {
	return &syncState{records: map[objKey]record{}, driftSeen: map[objKey]time.Time{}}
}

func (st *syncState) get(k objKey) (record, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	r, ok := st.records[k]
	return r, ok
}

func (st *syncState) set(k objKey, r record) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.records[k] = r
}

func (st *syncState) drop(k objKey) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.records, k)
}

// actAs forgets the records when the Sync now acts as another user: every
// object is then applied again, so a new identity proves it may write each
// one instead of inheriting what an earlier identity wrote.
func (st *syncState) actAs(user string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.identity != user {
		st.identity = user
		st.records = map[objKey]record{}
	}
}

func (st *syncState) sawDrift(k objKey, t time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.driftSeen[k]; !ok {
		st.driftSeen[k] = t
	}
}

func (st *syncState) takeDriftSeen(k objKey) (time.Time, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	t, ok := st.driftSeen[k]
	delete(st.driftSeen, k)
	return t, ok
}

// hashObject hashes the desired object (its canonical JSON).
func hashObject(u *unstructured.Unstructured) digest {
	b, _ := json.Marshal(u.Object) // maps marshal with sorted keys
	h := sha256.Sum256(b)
	return digest(h[:16])
}

// Results of applying one object.
const (
	resultCreated    = "created"
	resultConfigured = "configured"
	resultUnchanged  = "unchanged"
	resultDeleted    = "deleted"
	resultSkipped    = "skipped"
)

// changeSet counts the results of one run.
type changeSet struct {
	mu      gosync.Mutex
	counts  map[string]int
	entries []string
}

func (c *changeSet) add(result string, ref gitopsv1alpha1.ObjectRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[result]++
	if result != resultUnchanged {
		c.entries = append(c.entries, refString(ref)+" "+result)
	}
	applyResults.WithLabelValues(result).Inc()
}

func (c *changeSet) changed() bool {
	return c.counts[resultCreated]+c.counts[resultConfigured]+c.counts[resultDeleted] > 0
}

func (c *changeSet) summary() string {
	var parts []string
	for _, r := range []string{resultCreated, resultConfigured, resultUnchanged, resultDeleted, resultSkipped} {
		if n := c.counts[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, r))
		}
	}
	if len(parts) == 0 {
		return "no objects"
	}
	return strings.Join(parts, ", ")
}

func (c *changeSet) details(limit int) string {
	if len(c.entries) == 0 {
		return ""
	}
	sort.Strings(c.entries)
	e := c.entries
	more := ""
	if len(e) > limit {
		more = fmt.Sprintf("\n... and %d more", len(e)-limit)
		e = e[:limit]
	}
	return "\n" + strings.Join(e, "\n") + more
}
