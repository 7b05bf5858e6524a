package gitops

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/expr"
)

// +kubebuilder:webhook:path=/mutate-gitops-converge-dev-v1alpha1-sync,mutating=true,failurePolicy=fail,sideEffects=None,groups=gitops.converge.dev,resources=syncs,verbs=create;update,versions=v1alpha1,name=msync.gitops.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-gitops-converge-dev-v1alpha1-sync,mutating=false,failurePolicy=fail,sideEffects=None,groups=gitops.converge.dev,resources=syncs,verbs=create;update,versions=v1alpha1,name=vsync.gitops.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Defaults of Sync.
const (
	DefaultSyncInterval = 10 * time.Minute
	DefaultSyncTimeout  = 5 * time.Minute
	DefaultPruneLimit   = "50%"
)

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
	DefaultSync(s)
	return nil
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

// ValidateCreate checks a new Sync.
func (w Sync) ValidateCreate(_ context.Context, s *gitopsv1alpha1.Sync) (admission.Warnings, error) {
	return nil, invalid(syncKind, s.Name, w.validate(s))
}

// ValidateUpdate checks a changed spec; metadata-only changes always pass.
func (w Sync) ValidateUpdate(_ context.Context, old, s *gitopsv1alpha1.Sync) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, s.Spec) {
		return nil, nil
	}
	return nil, invalid(syncKind, s.Name, w.validate(s))
}

func (w Sync) validate(s *gitopsv1alpha1.Sync) field.ErrorList {
	p := field.NewPath("spec")
	errs := ValidateSyncSpec(s, p)
	if w.RequireServiceAccount && s.Spec.ServiceAccountName == "" {
		errs = append(errs, field.Required(p.Child("serviceAccountName"), ServiceAccountRequiredMessage(s.Namespace)))
	}
	return errs
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

// ValidateDelete allows every deletion.
func (Sync) ValidateDelete(context.Context, *gitopsv1alpha1.Sync) (admission.Warnings, error) {
	return nil, nil
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
