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

// +kubebuilder:webhook:path=/mutate-gitops-converge-dev-v1alpha1-sync,mutating=true,failurePolicy=fail,sideEffects=None,groups=gitops.converge.dev,resources=syncs,verbs=create;update,versions=v1alpha1,name=msync.gitops.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-gitops-converge-dev-v1alpha1-sync,mutating=false,failurePolicy=fail,sideEffects=None,groups=gitops.converge.dev,resources=syncs,verbs=create;update,versions=v1alpha1,name=vsync.gitops.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Sync defaults and validates Syncs.
type Sync struct {
	// RequireServiceAccount refuses a Sync that names no
	// spec.serviceAccountName: the manager runs in lockdown without a
	// default service account, so such a Sync could only act as the
	// manager.
	RequireServiceAccount bool
}

// SetupWithManager registers the webhooks with the manager's webhook server.
func (w Sync) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &gitopsv1alpha1.Sync{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default fills in the source kind, interval, timeout, pruneLimit, drift
// policy and the dependencies' apiVersion and kind.
func (Sync) Default(_ context.Context, s *gitopsv1alpha1.Sync) error {
	spec.DefaultSync(s)
	return nil
}

// ValidateCreate checks a new Sync.
func (w Sync) ValidateCreate(_ context.Context, s *gitopsv1alpha1.Sync) (admission.Warnings, error) {
	return nil, specerr.Invalid(gitopsv1alpha1.GroupVersion, syncKind, s.Name, w.validate(s))
}

// ValidateUpdate checks a changed spec; metadata-only changes always pass.
func (w Sync) ValidateUpdate(_ context.Context, old, s *gitopsv1alpha1.Sync) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, s.Spec) {
		return nil, nil
	}
	return nil, specerr.Invalid(gitopsv1alpha1.GroupVersion, syncKind, s.Name, w.validate(s))
}

func (w Sync) validate(s *gitopsv1alpha1.Sync) field.ErrorList {
	p := field.NewPath("spec")
	errs := spec.ValidateSyncSpec(s, p)
	if w.RequireServiceAccount && s.Spec.ServiceAccountName == "" {
		errs = append(errs, field.Required(p.Child("serviceAccountName"), spec.ServiceAccountRequiredMessage(s.Namespace)))
	}
	return errs
}

// ValidateDelete allows every deletion.
func (Sync) ValidateDelete(context.Context, *gitopsv1alpha1.Sync) (admission.Warnings, error) {
	return nil, nil
}
