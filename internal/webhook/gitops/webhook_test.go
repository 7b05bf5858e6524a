package gitops

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/spec"
	"github.com/converge-dev/converge/internal/webhook/specerr"
)

func TestValidateGitRepositorySpec(t *testing.T) {
	d := func(s string) *metav1.Duration { v, _ := time.ParseDuration(s); return &metav1.Duration{Duration: v} }
	cases := []struct {
		name string
		spec gitopsv1alpha1.GitRepositorySpec
		want string // substring of the error; empty: valid
	}{
		{name: "https", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://example.com/r.git"}},
		{name: "ssh", spec: gitopsv1alpha1.GitRepositorySpec{URL: "ssh://git@example.com/r.git"}},
		{name: "git", spec: gitopsv1alpha1.GitRepositorySpec{URL: "git://127.0.0.1:9418/r.git"}},
		{name: "file", spec: gitopsv1alpha1.GitRepositorySpec{URL: "file:///srv/git/r.git"}},
		{name: "bad scheme", spec: gitopsv1alpha1.GitRepositorySpec{URL: "ftp://example.com/r"}, want: `unsupported scheme "ftp"`},
		{name: "no host", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https:///r"}, want: "no host"},
		{name: "password in URL", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://u:p@example.com/r"}, want: "use spec.secretRef"},
		{name: "not a URL", spec: gitopsv1alpha1.GitRepositorySpec{URL: "://x"}, want: "not a URL"},
		{name: "branch and tag", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://e.com/r",
			Ref: &gitopsv1alpha1.GitRepositoryRef{Branch: "main", Tag: "v1"}}, want: "set only one of branch, tag and semver (got branch and tag)"},
		{name: "branch and commit", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://e.com/r",
			Ref: &gitopsv1alpha1.GitRepositoryRef{Branch: "main", Commit: "0123456789012345678901234567890123456789"}}},
		{name: "tag and commit", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://e.com/r",
			Ref: &gitopsv1alpha1.GitRepositoryRef{Tag: "v1", Commit: "0123456789012345678901234567890123456789"}}, want: "combined with branch only"},
		{name: "bad semver", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://e.com/r",
			Ref: &gitopsv1alpha1.GitRepositoryRef{SemVer: ">=> 1"}}, want: "not a semver range"},
		{name: "bad branch", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://e.com/r",
			Ref: &gitopsv1alpha1.GitRepositoryRef{Branch: "a..b"}}, want: "not a valid git ref name"},
		{name: "negative interval", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://e.com/r", Interval: d("-1m")}, want: "spec.interval: Invalid value"},
		{name: "zero timeout", spec: gitopsv1alpha1.GitRepositorySpec{URL: "https://e.com/r", Timeout: d("0s")}, want: "must be at least 1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := specerr.Invalid(gitopsv1alpha1.GroupVersion, "GitRepository", "x", spec.ValidateGitRepositorySpec(&tc.spec, field.NewPath("spec")))
			if tc.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestValidateSyncSpec(t *testing.T) {
	base := func(mut func(*gitopsv1alpha1.Sync)) *gitopsv1alpha1.Sync {
		s := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns"},
			Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "repo"}, Prune: ptr.To(true)}}
		spec.DefaultSync(s)
		if mut != nil {
			mut(s)
		}
		return s
	}
	cases := []struct {
		name string
		s    *gitopsv1alpha1.Sync
		want string
	}{
		{name: "defaults are valid", s: base(nil)},
		{name: "prune unset", s: base(func(s *gitopsv1alpha1.Sync) { s.Spec.Prune = nil }), want: "spec.prune: Required"},
		{name: "path escapes", s: base(func(s *gitopsv1alpha1.Sync) { s.Spec.Path = "../other" }), want: "inside the repository"},
		{name: "absolute path", s: base(func(s *gitopsv1alpha1.Sync) { s.Spec.Path = "/etc" }), want: "inside the repository"},
		{name: "relative path", s: base(func(s *gitopsv1alpha1.Sync) { s.Spec.Path = "./clusters/dev" })},
		{name: "pruneLimit 150%", s: base(func(s *gitopsv1alpha1.Sync) { v := intstr.FromString("150%"); s.Spec.PruneLimit = &v }), want: "between 0% and 100%"},
		{name: "pruneLimit words", s: base(func(s *gitopsv1alpha1.Sync) { v := intstr.FromString("half"); s.Spec.PruneLimit = &v }), want: "count or a percentage"},
		{name: "pruneLimit negative", s: base(func(s *gitopsv1alpha1.Sync) { v := intstr.FromInt32(-1); s.Spec.PruneLimit = &v }), want: "must not be negative"},
		{name: "negative retry", s: base(func(s *gitopsv1alpha1.Sync) { s.Spec.RetryInterval = &metav1.Duration{Duration: -time.Second} }), want: "spec.retryInterval"},
		{name: "malformed CEL", s: base(func(s *gitopsv1alpha1.Sync) {
			s.Spec.DependsOn = []gitopsv1alpha1.Dependency{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", Ready: "self.data.ready =="}}
		}), want: "spec.dependsOn[0].ready: Invalid value"},
		{name: "CEL not bool", s: base(func(s *gitopsv1alpha1.Sync) {
			s.Spec.HealthChecks = []gitopsv1alpha1.HealthCheck{{APIVersion: "x.io/v1", Kind: "Y", Current: "1"}}
		}), want: "must return a bool"},
		{name: "self dependency", s: base(func(s *gitopsv1alpha1.Sync) {
			s.Spec.DependsOn = []gitopsv1alpha1.Dependency{{Name: "app"}}
			spec.DefaultSync(s)
		}), want: "cannot depend on itself"},
		{name: "good CEL", s: base(func(s *gitopsv1alpha1.Sync) {
			s.Spec.DependsOn = []gitopsv1alpha1.Dependency{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", Ready: `self.data.ready == "yes"`}}
		})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := specerr.Invalid(gitopsv1alpha1.GroupVersion, "Sync", tc.s.Name, spec.ValidateSyncSpec(tc.s, field.NewPath("spec")))
			if tc.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestResolvePruneLimit(t *testing.T) {
	g := NewWithT(t)
	v := intstr.FromString("50%")
	n, err := spec.ResolvePruneLimit(&v, 5)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(2), "percentages round down")
	n, err = spec.ResolvePruneLimit(nil, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(5), "default 50%")
	c := intstr.FromInt32(3)
	n, err = spec.ResolvePruneLimit(&c, 100)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(3))
}

// TestSyncWebhookLockdown: in lockdown without a default service account a
// Sync must name one; the refusal names the field and how to grant rights.
func TestSyncWebhookLockdown(t *testing.T) {
	g := NewWithT(t)
	s := &gitopsv1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"},
		Spec: gitopsv1alpha1.SyncSpec{SourceRef: gitopsv1alpha1.SourceReference{Name: "repo"}, Prune: ptr.To(true)}}
	spec.DefaultSync(s)

	_, err := Sync{}.ValidateCreate(t.Context(), s)
	g.Expect(err).NotTo(HaveOccurred(), "outside lockdown the manager's identity is allowed")

	locked := Sync{RequireServiceAccount: true}
	_, err = locked.ValidateCreate(t.Context(), s)
	g.Expect(err).To(MatchError(ContainSubstring("spec.serviceAccountName: Required value")))
	g.Expect(err).To(MatchError(ContainSubstring("create rolebinding deployer --clusterrole=edit --serviceaccount=team-a:deployer")))

	changed := s.DeepCopy()
	changed.Spec.Path = "other"
	_, err = locked.ValidateUpdate(t.Context(), s, changed)
	g.Expect(err).To(MatchError(ContainSubstring("spec.serviceAccountName")), "a changed spec must name one too")
	relabelled := s.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	_, err = locked.ValidateUpdate(t.Context(), s, relabelled)
	g.Expect(err).NotTo(HaveOccurred(), "metadata-only changes always pass")

	changed.Spec.ServiceAccountName = "deployer"
	_, err = locked.ValidateUpdate(t.Context(), s, changed)
	g.Expect(err).NotTo(HaveOccurred())
}
