// Package spec holds the spec rules of the gitops.converge.dev kinds
// (defaults and the validation the schema cannot express), below both the
// admission webhooks (internal/webhook/gitops) and the controllers (sync,
// gitrepository), which apply them again to objects stored while the
// webhook was off.
package spec

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/expr"
)

const (
	gitRepositoryKind = "GitRepository"
	syncKind          = "Sync"
)

// Defaults of GitRepository.
const (
	DefaultBranch             = "main"
	DefaultGitRepoInterval    = time.Minute
	DefaultGitRepoTimeout     = 60 * time.Second
	minInterval               = time.Second
	maxTimeout                = time.Hour
	supportedURLSchemesString = "https, http, ssh, git or file"
)

// Defaults of Sync.
const (
	DefaultSyncInterval = 10 * time.Minute
	DefaultSyncTimeout  = 5 * time.Minute
	DefaultPruneLimit   = "50%"
)

// DefaultGitRepository sets the ref to the main branch, the interval and the
// timeout when unset; the webhook and the controller both call it.
func DefaultGitRepository(r *gitopsv1alpha1.GitRepository) {
	if r.Spec.Ref == nil || *r.Spec.Ref == (gitopsv1alpha1.GitRepositoryRef{}) {
		r.Spec.Ref = &gitopsv1alpha1.GitRepositoryRef{Branch: DefaultBranch}
	}
	if r.Spec.Interval == nil {
		r.Spec.Interval = &metav1.Duration{Duration: DefaultGitRepoInterval}
	}
	if r.Spec.Timeout == nil {
		r.Spec.Timeout = &metav1.Duration{Duration: DefaultGitRepoTimeout}
	}
}

// DefaultSync applies the defaults; the controller calls it too, so objects
// created while the webhook was not installed behave the same.
func DefaultSync(s *gitopsv1alpha1.Sync) {
	if s.Spec.SourceRef.Kind == "" {
		s.Spec.SourceRef.Kind = gitRepositoryKind
	}
	if s.Spec.Interval == nil {
		s.Spec.Interval = &metav1.Duration{Duration: DefaultSyncInterval}
	}
	if s.Spec.Timeout == nil {
		s.Spec.Timeout = &metav1.Duration{Duration: DefaultSyncTimeout}
	}
	if s.Spec.PruneLimit == nil {
		v := intstr.FromString(DefaultPruneLimit)
		s.Spec.PruneLimit = &v
	}
	if s.Spec.DriftPolicy == "" {
		s.Spec.DriftPolicy = gitopsv1alpha1.DriftPolicyCorrect
	}
	for i := range s.Spec.DependsOn {
		d := &s.Spec.DependsOn[i]
		if d.APIVersion == "" && d.Kind == "" {
			d.APIVersion, d.Kind = gitopsv1alpha1.GroupVersion.String(), syncKind
		}
	}
}

// ServiceAccountRequiredMessage says why a Sync without a service account
// is refused in lockdown and how to grant one rights; the webhook and the
// controller (for Syncs stored while the webhook was off) both use it.
func ServiceAccountRequiredMessage(namespace string) string {
	return fmt.Sprintf("the manager runs in lockdown (--gitops-lockdown) with no default service account, so a Sync never acts as the manager: "+
		"name a ServiceAccount of namespace %[1]s that holds exactly what the Sync applies and reads, e.g. "+
		"kubectl -n %[1]s create serviceaccount deployer && "+
		"kubectl -n %[1]s create rolebinding deployer --clusterrole=edit --serviceaccount=%[1]s:deployer, "+
		"then set spec.serviceAccountName: deployer (or ask the cluster admin for --gitops-default-service-account)", namespace)
}

// ValidateGitRepositorySpec checks what the schema cannot: the URL parses
// with a supported scheme and a host, one kind of ref is set, a semver range
// parses, durations are positive. The controller calls it too, for objects
// stored before a rule existed.
func ValidateGitRepositorySpec(spec *gitopsv1alpha1.GitRepositorySpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateURL(spec.URL, p.Child("url"))...)
	if ref := spec.Ref; ref != nil {
		rp := p.Child("ref")
		set := []string{}
		for name, v := range map[string]string{"branch": ref.Branch, "tag": ref.Tag, "semver": ref.SemVer} {
			if v != "" {
				set = append(set, name)
			}
		}
		if len(set) > 1 {
			errs = append(errs, field.Invalid(rp, ref, "set only one of branch, tag and semver (got "+strings.Join(sortedCopy(set), " and ")+")"))
		}
		if ref.Commit != "" && (ref.Tag != "" || ref.SemVer != "") {
			errs = append(errs, field.Invalid(rp.Child("commit"), ref.Commit, "commit may be combined with branch only, not with tag or semver"))
		}
		if ref.SemVer != "" {
			if _, err := semver.NewConstraint(ref.SemVer); err != nil {
				errs = append(errs, field.Invalid(rp.Child("semver"), ref.SemVer, "not a semver range: "+err.Error()))
			}
		}
		for name, v := range map[string]string{"branch": ref.Branch, "tag": ref.Tag} {
			if v != "" && (strings.ContainsAny(v, " ~^:?*[\\") || strings.Contains(v, "..") || strings.HasPrefix(v, "-")) {
				errs = append(errs, field.Invalid(rp.Child(name), v, "not a valid git ref name"))
			}
		}
	}
	errs = append(errs, positive(spec.Interval, p.Child("interval"), 0)...)
	errs = append(errs, positive(spec.Timeout, p.Child("timeout"), maxTimeout)...)
	return errs
}

func validateURL(raw string, p *field.Path) field.ErrorList {
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Invalid(p, raw, "not a URL: "+err.Error())}
	}
	switch u.Scheme {
	case "https", "http", "ssh", "git":
		if u.Host == "" {
			return field.ErrorList{field.Invalid(p, raw, "the URL has no host")}
		}
		if u.Scheme != "ssh" && u.User != nil {
			if _, hasPassword := u.User.Password(); hasPassword {
				return field.ErrorList{field.Invalid(p, raw, "do not put credentials in the URL; use spec.secretRef")}
			}
		}
	case "file":
		if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
			return field.ErrorList{field.Invalid(p, raw, "a file URL needs an absolute path, as file:///srv/git/repo.git")}
		}
	default:
		return field.ErrorList{field.Invalid(p, raw, fmt.Sprintf("unsupported scheme %q: use %s", u.Scheme, supportedURLSchemesString))}
	}
	return nil
}

// positive checks a duration is at least minInterval and, when hi > 0, at
// most hi.
func positive(d *metav1.Duration, p *field.Path, hi time.Duration) field.ErrorList {
	lo := minInterval
	if d == nil {
		return nil
	}
	if d.Duration < lo {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be at least "+lo.String())}
	}
	if hi > 0 && d.Duration > hi {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be at most "+hi.String())}
	}
	return nil
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// ValidateSyncSpec checks what the schema cannot: the path stays inside the
// repository, durations are positive, pruneLimit is a count or a percentage
// up to 100%, dependencies are well-formed and every CEL expression
// compiles. The controller calls it too.
func ValidateSyncSpec(s *gitopsv1alpha1.Sync, p *field.Path) field.ErrorList {
	spec := &s.Spec
	var errs field.ErrorList
	if spec.Prune == nil {
		errs = append(errs, field.Required(p.Child("prune"), "set prune to true (delete objects removed from git) or false (leave them)"))
	}
	if spec.Path != "" {
		clean := path.Clean("/" + spec.Path)
		if strings.HasPrefix(spec.Path, "/") || strings.Contains(spec.Path, "\\") || clean != path.Clean("/"+strings.TrimPrefix(spec.Path, "./")) ||
			strings.Split(path.Clean(spec.Path), "/")[0] == ".." {
			errs = append(errs, field.Invalid(p.Child("path"), spec.Path, "must be a relative path inside the repository, without .."))
		}
	}
	if spec.SourceRef.Namespace != "" {
		for _, m := range validation.IsDNS1123Label(spec.SourceRef.Namespace) {
			errs = append(errs, field.Invalid(p.Child("sourceRef", "namespace"), spec.SourceRef.Namespace, m))
		}
	}
	errs = append(errs, positive(spec.Interval, p.Child("interval"), 0)...)
	errs = append(errs, positive(spec.RetryInterval, p.Child("retryInterval"), 0)...)
	errs = append(errs, positive(spec.Timeout, p.Child("timeout"), 24*time.Hour)...)
	if pl := spec.PruneLimit; pl != nil {
		if _, err := ResolvePruneLimit(pl, 100); err != nil {
			errs = append(errs, field.Invalid(p.Child("pruneLimit"), pl.String(), err.Error()))
		}
	}
	if spec.ServiceAccountName != "" {
		for _, m := range validation.IsDNS1123Subdomain(spec.ServiceAccountName) {
			errs = append(errs, field.Invalid(p.Child("serviceAccountName"), spec.ServiceAccountName, m))
		}
	}
	for i, d := range spec.DependsOn {
		dp := p.Child("dependsOn").Index(i)
		gv, err := schema.ParseGroupVersion(d.APIVersion)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(dp.Child("apiVersion"), d.APIVersion, err.Error()))
		case d.Kind == "":
			errs = append(errs, field.Required(dp.Child("kind"), "kind is required with apiVersion"))
		case gv == gitopsv1alpha1.GroupVersion && d.Kind == syncKind && d.Name == s.Name &&
			(d.Namespace == "" || d.Namespace == s.Namespace):
			errs = append(errs, field.Invalid(dp.Child("name"), d.Name, "a Sync cannot depend on itself"))
		}
		if d.Ready != "" {
			if _, err := expr.Compile(d.Ready); err != nil {
				errs = append(errs, field.Invalid(dp.Child("ready"), d.Ready, err.Error()))
			}
		}
	}
	for i, h := range spec.HealthChecks {
		hp := p.Child("healthChecks").Index(i)
		if _, err := schema.ParseGroupVersion(h.APIVersion); err != nil {
			errs = append(errs, field.Invalid(hp.Child("apiVersion"), h.APIVersion, err.Error()))
		}
		if _, err := expr.Compile(h.Current); err != nil {
			errs = append(errs, field.Invalid(hp.Child("current"), h.Current, err.Error()))
		}
		if h.Failed != "" {
			if _, err := expr.Compile(h.Failed); err != nil {
				errs = append(errs, field.Invalid(hp.Child("failed"), h.Failed, err.Error()))
			}
		}
	}
	return errs
}

// ResolvePruneLimit turns pruneLimit into a count of objects for an
// inventory of total objects (percentages round down, as maxUnavailable).
func ResolvePruneLimit(pl *intstr.IntOrString, total int) (int, error) {
	if pl == nil {
		v := intstr.FromString(DefaultPruneLimit)
		pl = &v
	}
	if pl.Type == intstr.String && !strings.HasSuffix(pl.StrVal, "%") {
		return 0, fmt.Errorf("must be a count or a percentage such as 50%%, got %q", pl.StrVal)
	}
	if pl.Type == intstr.String {
		var pct int
		if _, err := fmt.Sscanf(pl.StrVal, "%d%%", &pct); err != nil || fmt.Sprintf("%d%%", pct) != pl.StrVal {
			return 0, fmt.Errorf("must be a count or a percentage such as 50%%, got %q", pl.StrVal)
		}
		if pct < 0 || pct > 100 {
			return 0, fmt.Errorf("a percentage must be between 0%% and 100%%, got %q", pl.StrVal)
		}
	}
	if pl.Type == intstr.Int && pl.IntVal < 0 {
		return 0, fmt.Errorf("must not be negative, got %d", pl.IntVal)
	}
	return intstr.GetScaledValueFromIntOrPercent(pl, total, false)
}
