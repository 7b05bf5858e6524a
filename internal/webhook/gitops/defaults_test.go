package gitops

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/spec"
)

// TestGitRepositoryDefaults: only what is unset is defaulted; a ref that
// names anything is kept as written.
func TestGitRepositoryDefaults(t *testing.T) {
	g := NewWithT(t)
	r := &gitopsv1alpha1.GitRepository{}
	g.Expect(GitRepository{}.Default(context.Background(), r)).To(Succeed())
	g.Expect(r.Spec.Ref).To(Equal(&gitopsv1alpha1.GitRepositoryRef{Branch: spec.DefaultBranch}))
	g.Expect(r.Spec.Interval.Duration).To(Equal(spec.DefaultGitRepoInterval))
	g.Expect(r.Spec.Timeout.Duration).To(Equal(spec.DefaultGitRepoTimeout))

	r = &gitopsv1alpha1.GitRepository{Spec: gitopsv1alpha1.GitRepositorySpec{Ref: &gitopsv1alpha1.GitRepositoryRef{}}}
	g.Expect(GitRepository{}.Default(context.Background(), r)).To(Succeed())
	g.Expect(r.Spec.Ref.Branch).To(Equal(spec.DefaultBranch), "an empty ref is no ref")

	set := gitopsv1alpha1.GitRepositorySpec{
		Ref:      &gitopsv1alpha1.GitRepositoryRef{Tag: "v1.2.3"},
		Interval: &metav1.Duration{Duration: 7 * time.Second},
		Timeout:  &metav1.Duration{Duration: 9 * time.Second},
	}
	r = &gitopsv1alpha1.GitRepository{Spec: *set.DeepCopy()}
	g.Expect(GitRepository{}.Default(context.Background(), r)).To(Succeed())
	g.Expect(r.Spec).To(Equal(set), "nothing the user set is overwritten")
}

// TestSyncDefaults: the same rule for Syncs, including dependsOn entries
// (only an entry with neither apiVersion nor kind means "a Sync").
func TestSyncDefaults(t *testing.T) {
	g := NewWithT(t)
	s := &gitopsv1alpha1.Sync{Spec: gitopsv1alpha1.SyncSpec{DependsOn: []gitopsv1alpha1.Dependency{
		{Name: "a"},
		{APIVersion: "v1", Name: "b"},
		{Kind: "ConfigMap", Name: "c"},
	}}}
	spec.DefaultSync(s)
	g.Expect(s.Spec.SourceRef.Kind).To(Equal(gitRepositoryKind))
	g.Expect(s.Spec.Interval.Duration).To(Equal(spec.DefaultSyncInterval))
	g.Expect(s.Spec.Timeout.Duration).To(Equal(spec.DefaultSyncTimeout))
	g.Expect(s.Spec.PruneLimit.String()).To(Equal(spec.DefaultPruneLimit))
	g.Expect(s.Spec.DriftPolicy).To(Equal(gitopsv1alpha1.DriftPolicyCorrect))
	g.Expect(s.Spec.DependsOn[0].APIVersion).To(Equal(gitopsv1alpha1.GroupVersion.String()))
	g.Expect(s.Spec.DependsOn[0].Kind).To(Equal(syncKind))
	g.Expect(s.Spec.DependsOn[1]).To(Equal(gitopsv1alpha1.Dependency{APIVersion: "v1", Name: "b"}), "half-written entries are left for validation to name")
	g.Expect(s.Spec.DependsOn[2]).To(Equal(gitopsv1alpha1.Dependency{Kind: "ConfigMap", Name: "c"}))

	limit := intstr.FromInt32(3)
	set := gitopsv1alpha1.SyncSpec{
		SourceRef:   gitopsv1alpha1.SourceReference{Kind: "Bucket", Name: "x"},
		Interval:    &metav1.Duration{Duration: time.Second},
		Timeout:     &metav1.Duration{Duration: 2 * time.Second},
		PruneLimit:  &limit,
		DriftPolicy: gitopsv1alpha1.DriftPolicy("Report"),
	}
	s = &gitopsv1alpha1.Sync{Spec: *set.DeepCopy()}
	spec.DefaultSync(s)
	g.Expect(s.Spec).To(Equal(set), "nothing the user set is overwritten")
}

// TestSyncSelfDependency: a Sync may not depend on itself, whichever way
// the entry names it, and only on itself.
func TestSyncSelfDependency(t *testing.T) {
	self := func(d gitopsv1alpha1.Dependency) field.ErrorList {
		s := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"},
			Spec: gitopsv1alpha1.SyncSpec{Prune: ptr.To(true), DependsOn: []gitopsv1alpha1.Dependency{d}}}
		return spec.ValidateSyncSpec(s, field.NewPath("spec"))
	}
	gv := gitopsv1alpha1.GroupVersion.String()
	cases := []struct {
		name string
		dep  gitopsv1alpha1.Dependency
		want bool
	}{
		{"same namespace implied", gitopsv1alpha1.Dependency{APIVersion: gv, Kind: syncKind, Name: "app"}, true},
		{"same namespace written", gitopsv1alpha1.Dependency{APIVersion: gv, Kind: syncKind, Name: "app", Namespace: "team"}, true},
		{"another namespace", gitopsv1alpha1.Dependency{APIVersion: gv, Kind: syncKind, Name: "app", Namespace: "other"}, false},
		{"another name", gitopsv1alpha1.Dependency{APIVersion: gv, Kind: syncKind, Name: "db"}, false},
		{"another kind", gitopsv1alpha1.Dependency{APIVersion: gv, Kind: gitRepositoryKind, Name: "app"}, false},
		{"another group", gitopsv1alpha1.Dependency{APIVersion: "example.com/v1", Kind: syncKind, Name: "app"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := self(tc.dep)
			if tc.want {
				g.Expect(errs.ToAggregate()).To(MatchError(ContainSubstring("a Sync cannot depend on itself")))
				return
			}
			g.Expect(errs).To(BeEmpty())
		})
	}
}
