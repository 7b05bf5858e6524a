package reconcile_test

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/converge-dev/converge/pkg/reconcile"
)

func TestPatchStatusLockedSendsNothingUnchanged(t *testing.T) {
	r := newRepo(t)
	base := r.DeepCopy()
	sent, err := reconcile.PatchStatusLocked(t.Context(), env.Client, base, r)
	if err != nil || sent {
		t.Fatalf("PatchStatusLocked of an unchanged status: sent %v, err %v", sent, err)
	}
	if got := get(t, r).ResourceVersion; got != r.ResourceVersion {
		t.Fatalf("an unchanged status was written: resourceVersion %s -> %s", r.ResourceVersion, got)
	}
}

// Two reconciles read the same object and both mean to record something
// only one of them may record (a step starting, an address taken): the
// second write must fail with a conflict and leave the first one's intact,
// not be merged over it.
func TestPatchStatusLockedReturnsTheConflict(t *testing.T) {
	r := newRepo(t)
	first, second := r.DeepCopy(), r.DeepCopy()
	firstBase, secondBase := first.DeepCopy(), second.DeepCopy()

	first.Status.LastHandledReconcileAt = "first"
	if sent, err := reconcile.PatchStatusLocked(t.Context(), env.Client, firstBase, first); err != nil || !sent {
		t.Fatalf("first write: sent %v, err %v", sent, err)
	}
	if first.ResourceVersion == r.ResourceVersion {
		t.Fatal("the caller's object was not refreshed from the response")
	}
	second.Status.LastHandledReconcileAt = "second"
	sent, err := reconcile.PatchStatusLocked(t.Context(), env.Client, secondBase, second)
	if !apierrors.IsConflict(err) || sent {
		t.Fatalf("second write on a stale read: sent %v, err %v; want a conflict", sent, err)
	}
	if got := get(t, r).Status.LastHandledReconcileAt; got != "first" {
		t.Fatalf("status = %q after the conflicting write, want the first writer's", got)
	}

	// The next write, based on what the first one stored, goes through.
	next := first.DeepCopy()
	next.Status.LastHandledReconcileAt = "third"
	if _, err := reconcile.PatchStatusLocked(t.Context(), env.Client, first, next); err != nil {
		t.Fatal(err)
	}
	if got := get(t, r).Status.LastHandledReconcileAt; got != "third" {
		t.Fatalf("status = %q, want third", got)
	}
}

func TestEnsureFinalizerWithWritesBothOrNothing(t *testing.T) {
	r := newRepo(t)
	stale := r.DeepCopy()
	const fin = "test.converge.dev/guard"
	added, err := reconcile.EnsureFinalizerWith(t.Context(), env.Client, r, fin, func() { r.Spec.URL = "https://git.example/other.git" })
	if err != nil || !added {
		t.Fatalf("EnsureFinalizerWith: added %v, err %v", added, err)
	}
	got := get(t, r)
	if !controllerutil.ContainsFinalizer(got, fin) || got.Spec.URL != "https://git.example/other.git" {
		t.Fatalf("stored finalizers %v, url %q: want both written", got.Finalizers, got.Spec.URL)
	}
	rv := got.ResourceVersion
	// Already so: nothing is sent.
	added, err = reconcile.EnsureFinalizerWith(t.Context(), env.Client, r, fin, func() { r.Spec.URL = "https://git.example/other.git" })
	if err != nil || added {
		t.Fatalf("second EnsureFinalizerWith: added %v, err %v; want nothing sent", added, err)
	}
	if get(t, r).ResourceVersion != rv {
		t.Fatal("an unchanged object was written")
	}
	// A writer on a stale read gets the conflict, and writes neither.
	_, err = reconcile.EnsureFinalizerWith(t.Context(), env.Client, stale, "test.converge.dev/other", func() { stale.Spec.URL = "https://git.example/stale.git" })
	if !apierrors.IsConflict(err) {
		t.Fatalf("EnsureFinalizerWith on a stale read: err %v, want a conflict", err)
	}
	got = get(t, r)
	if controllerutil.ContainsFinalizer(got, "test.converge.dev/other") || got.Spec.URL != "https://git.example/other.git" {
		t.Fatalf("the stale write reached the server: finalizers %v, url %q", got.Finalizers, got.Spec.URL)
	}
	// Leave the namespace deletable.
	if err := reconcile.RemoveFinalizer(t.Context(), env.Client, r, fin); err != nil {
		t.Fatal(err)
	}
}
