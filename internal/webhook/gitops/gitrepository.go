// Package gitops holds the admission webhooks (defaulting and validation) of
// the gitops.converge.dev API group.
package gitops

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-gitops-converge-dev-v1alpha1-gitrepository,mutating=true,failurePolicy=fail,sideEffects=None,groups=gitops.converge.dev,resources=gitrepositories,verbs=create;update,versions=v1alpha1,name=mgitrepository.gitops.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-gitops-converge-dev-v1alpha1-gitrepository,mutating=false,failurePolicy=fail,sideEffects=None,groups=gitops.converge.dev,resources=gitrepositories,verbs=create;update,versions=v1alpha1,name=vgitrepository.gitops.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Defaults of GitRepository.
const (
	DefaultBranch             = "main"
	DefaultGitRepoInterval    = time.Minute
	DefaultGitRepoTimeout     = 60 * time.Second
	minInterval               = time.Second
	maxTimeout                = time.Hour
	gitRepositoryKind         = "GitRepository"
	syncKind                  = "Sync"
	supportedURLSchemesString = "https, http, ssh, git or file"
)

// GitRepository defaults and validates GitRepositories.
type GitRepository struct{}

// SetupWithManager registers the webhooks with the manager's webhook server.
func (w GitRepository) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &gitopsv1alpha1.GitRepository{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default sets the ref to the main branch, the interval and the timeout.
func (GitRepository) Default(_ context.Context, r *gitopsv1alpha1.GitRepository) error {
	if r.Spec.Ref == nil || *r.Spec.Ref == (gitopsv1alpha1.GitRepositoryRef{}) {
		r.Spec.Ref = &gitopsv1alpha1.GitRepositoryRef{Branch: DefaultBranch}
	}
	if r.Spec.Interval == nil {
		r.Spec.Interval = &metav1.Duration{Duration: DefaultGitRepoInterval}
	}
	if r.Spec.Timeout == nil {
		r.Spec.Timeout = &metav1.Duration{Duration: DefaultGitRepoTimeout}
	}
	return nil
}

// ValidateCreate checks a new GitRepository.
func (GitRepository) ValidateCreate(_ context.Context, r *gitopsv1alpha1.GitRepository) (admission.Warnings, error) {
	return nil, invalid(gitRepositoryKind, r.Name, ValidateGitRepositorySpec(&r.Spec, field.NewPath("spec")))
}

// ValidateUpdate checks a changed spec; metadata-only changes always pass.
func (GitRepository) ValidateUpdate(_ context.Context, old, r *gitopsv1alpha1.GitRepository) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, r.Spec) {
		return nil, nil
	}
	return nil, invalid(gitRepositoryKind, r.Name, ValidateGitRepositorySpec(&r.Spec, field.NewPath("spec")))
}

// ValidateDelete allows every deletion.
func (GitRepository) ValidateDelete(context.Context, *gitopsv1alpha1.GitRepository) (admission.Warnings, error) {
	return nil, nil
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

func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(gitopsv1alpha1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}
