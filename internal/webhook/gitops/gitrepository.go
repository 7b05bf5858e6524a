// Package gitops holds the admission webhooks (defaulting and validation) of
// the gitops.converge.dev API group.
package gitops

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/spec"
	"github.com/converge-dev/converge/internal/webhook/specerr"
)

// +kubebuilder:webhook:path=/mutate-gitops-converge-dev-v1alpha1-gitrepository,mutating=true,failurePolicy=fail,sideEffects=None,groups=gitops.converge.dev,resources=gitrepositories,verbs=create;update,versions=v1alpha1,name=mgitrepository.gitops.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-gitops-converge-dev-v1alpha1-gitrepository,mutating=false,failurePolicy=fail,sideEffects=None,groups=gitops.converge.dev,resources=gitrepositories,verbs=create;update,versions=v1alpha1,name=vgitrepository.gitops.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

const (
	gitRepositoryKind = "GitRepository"
	syncKind          = "Sync"
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

// Default sets the ref to the main branch, the interval and the timeout
// (spec.DefaultGitRepository).
func (GitRepository) Default(_ context.Context, r *gitopsv1alpha1.GitRepository) error {
	spec.DefaultGitRepository(r)
	return nil
}

// ValidateCreate checks a new GitRepository.
func (GitRepository) ValidateCreate(_ context.Context, r *gitopsv1alpha1.GitRepository) (admission.Warnings, error) {
	return nil, specerr.Invalid(gitopsv1alpha1.GroupVersion, gitRepositoryKind, r.Name, spec.ValidateGitRepositorySpec(&r.Spec, field.NewPath("spec")))
}

// ValidateUpdate checks a changed spec; metadata-only changes always pass.
func (GitRepository) ValidateUpdate(_ context.Context, old, r *gitopsv1alpha1.GitRepository) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, r.Spec) {
		return nil, nil
	}
	return nil, specerr.Invalid(gitopsv1alpha1.GroupVersion, gitRepositoryKind, r.Name, spec.ValidateGitRepositorySpec(&r.Spec, field.NewPath("spec")))
}

// ValidateDelete allows every deletion.
func (GitRepository) ValidateDelete(context.Context, *gitopsv1alpha1.GitRepository) (admission.Warnings, error) {
	return nil, nil
}
