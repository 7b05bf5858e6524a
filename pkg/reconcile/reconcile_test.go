package reconcile_test

import (
	"os"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

var env *testenv.Environment

// No controller runs: the tests are the only writers of the objects, plus
// the "other writer" each one plays.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.Options{NoManager: true}, &env)) }

func newRepo(t *testing.T) *gitopsv1alpha1.GitRepository {
	t.Helper()
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	r := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://git.example/r.git"}}
	if err := env.Client.Create(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

func get(t *testing.T, r *gitopsv1alpha1.GitRepository) *gitopsv1alpha1.GitRepository {
	t.Helper()
	out := &gitopsv1alpha1.GitRepository{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(r), out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUnchangedStatusIsNotWritten(t *testing.T) {
	r := newRepo(t)
	p := reconcile.NewStatusPatcher(env.Client, r)
	rv := r.ResourceVersion
	if err := p.Patch(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if got := get(t, r).ResourceVersion; got != rv {
		t.Fatalf("an unchanged status was written: resourceVersion %s -> %s", rv, got)
	}
}

func TestConditionsCarryTheGeneration(t *testing.T) {
	r := newRepo(t)
	p := reconcile.NewStatusPatcher(env.Client, r)
	reconcile.MarkFalse(&r.Status.Conditions, r.Generation, "Ready", "Fetching", "fetching")
	r.Status.ObservedGeneration = r.Generation
	if err := p.Patch(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	got := get(t, r)
	if reconcile.Reason(got.Status.Conditions, "Ready") != "Fetching" || got.Status.Conditions[0].ObservedGeneration != r.Generation {
		t.Fatalf("conditions = %+v, want Ready/Fetching at generation %d", got.Status.Conditions, r.Generation)
	}
	if got.ResourceVersion != r.ResourceVersion {
		t.Fatalf("the caller's object was not refreshed: %s, server %s", r.ResourceVersion, got.ResourceVersion)
	}
	// A second write through the same patcher is based on the first.
	reconcile.MarkTrue(&r.Status.Conditions, r.Generation, "Ready", "Succeeded", "done")
	if err := p.Patch(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if !reconcile.IsTrue(get(t, r).Status.Conditions, "Ready") {
		t.Fatal("the second write was lost")
	}
}

// Another controller writes its own condition and a field between this
// reconcile's read and its write: the write meets a conflict, and re-applies
// only its own changes, so the other writer's condition survives and a
// condition this reconcile removed stays removed.
func TestStatusPatchConflictKeepsTheOtherWriter(t *testing.T) {
	r := newRepo(t)
	seed := reconcile.NewStatusPatcher(env.Client, r)
	reconcile.MarkTrue(&r.Status.Conditions, r.Generation, "Stalled", "Old", "old")
	reconcile.MarkTrue(&r.Status.Conditions, r.Generation, "Ready", "Old", "old")
	if err := seed.Patch(t.Context(), r); err != nil {
		t.Fatal(err)
	}

	p := reconcile.NewStatusPatcher(env.Client, r)

	other := get(t, r)
	reconcile.MarkTrue(&other.Status.Conditions, other.Generation, "BackupReady", "Other", "the other controller's")
	other.Status.LastHandledReconcileAt = "other"
	if err := env.Client.Status().Update(t.Context(), other); err != nil {
		t.Fatal(err)
	}

	reconcile.Remove(&r.Status.Conditions, "Stalled")
	reconcile.MarkFalse(&r.Status.Conditions, r.Generation, "Ready", "Mine", "mine")
	r.Status.ObservedGeneration = 7
	if err := p.Patch(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	got := get(t, r)
	if reconcile.Reason(got.Status.Conditions, "BackupReady") != "Other" {
		t.Errorf("the other writer's condition was lost: %+v", got.Status.Conditions)
	}
	if got.Status.LastHandledReconcileAt != "other" {
		t.Errorf("the other writer's field was lost: %q", got.Status.LastHandledReconcileAt)
	}
	if reconcile.Reason(got.Status.Conditions, "Ready") != "Mine" || got.Status.ObservedGeneration != 7 {
		t.Errorf("this reconcile's changes were lost: %+v, observedGeneration %d", got.Status.Conditions, got.Status.ObservedGeneration)
	}
	if reconcile.Reason(got.Status.Conditions, "Stalled") != "" {
		t.Errorf("a condition this reconcile removed came back: %+v", got.Status.Conditions)
	}
	if reconcile.Reason(r.Status.Conditions, "BackupReady") != "Other" {
		t.Errorf("the caller's object does not show what the server holds: %+v", r.Status.Conditions)
	}
}

func TestPatchOfADeletedObjectIsNotAnError(t *testing.T) {
	r := newRepo(t)
	p := reconcile.NewStatusPatcher(env.Client, r)
	if err := env.Client.Delete(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	reconcile.MarkTrue(&r.Status.Conditions, r.Generation, "Ready", "Succeeded", "")
	if err := p.Patch(t.Context(), r); err != nil {
		t.Fatalf("Patch of a deleted object: %v", err)
	}
}

func TestFinalizers(t *testing.T) {
	r := newRepo(t)
	// Status changed in memory before the finalizer is added is kept for
	// the deferred patch.
	reconcile.MarkTrue(&r.Status.Conditions, r.Generation, "Ready", "InMemory", "")
	added, err := reconcile.EnsureFinalizer(t.Context(), env.Client, r, "converge.dev/a")
	if err != nil || !added {
		t.Fatalf("EnsureFinalizer = %v, %v", added, err)
	}
	if reconcile.Reason(r.Status.Conditions, "Ready") != "InMemory" {
		t.Fatal("EnsureFinalizer overwrote the in-memory status")
	}
	if added, err := reconcile.EnsureFinalizer(t.Context(), env.Client, r, "converge.dev/a"); err != nil || added {
		t.Fatalf("second EnsureFinalizer = %v, %v; want no write", added, err)
	}

	// Another controller adds its finalizer; a write from the stale copy
	// is refused rather than dropping it.
	other := get(t, r)
	other.Finalizers = append(other.Finalizers, "converge.dev/other")
	if err := env.Client.Update(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.EnsureFinalizer(t.Context(), env.Client, r, "converge.dev/b"); !apierrors.IsConflict(err) {
		t.Fatalf("EnsureFinalizer on a stale object = %v, want a conflict", err)
	}
	r = get(t, r)
	if err := reconcile.RemoveFinalizer(t.Context(), env.Client, r, "converge.dev/a"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, r).Finalizers; len(got) != 1 || got[0] != "converge.dev/other" {
		t.Fatalf("finalizers = %v, want only the other controller's", got)
	}
	// Removing the last finalizer of a deleted object lets it go.
	if err := env.Client.Delete(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	r = get(t, r)
	if err := reconcile.RemoveFinalizer(t.Context(), env.Client, r, "converge.dev/other"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(r), &gitopsv1alpha1.GitRepository{}); !apierrors.IsNotFound(err) {
		t.Fatalf("object still there after its last finalizer went: %v", err)
	}
}
