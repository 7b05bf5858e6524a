// Package upgrade holds the admission webhook of the upgrade.converge.dev
// API group. A MachineUpgrade is refused, naming the field, when its
// selector or a check does not compile, when its target (selector, image,
// version) changes after creation, when abort is unset once set, and when
// it selects a Machine that another unfinished MachineUpgrade of the
// namespace selects: only one upgrade may progress per set of Machines, and
// the message names the first.
package upgrade

import (
	"context"
	"fmt"
	"regexp"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/upgradecheck"
	"github.com/converge-dev/converge/internal/upgradeoverlap"
	"github.com/converge-dev/converge/internal/webhook/specerr"
)

// +kubebuilder:webhook:path=/validate-upgrade-converge-dev-v1alpha1-machineupgrade,mutating=false,failurePolicy=fail,sideEffects=None,groups=upgrade.converge.dev,resources=machineupgrades,verbs=create;update,versions=v1alpha1,name=vmachineupgrade.upgrade.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// +kubebuilder:rbac:groups=upgrade.converge.dev,resources=machineupgrades,verbs=get;list;watch
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines,verbs=get;list;watch

// MachineUpgrade validates MachineUpgrades.
type MachineUpgrade struct {
	// Reader reads the other MachineUpgrades and the Machines: the
	// manager's cache (set by SetupWithManager), so that an admission
	// request, which anyone reaching the webhook port can send, never costs
	// an API read. A MachineUpgrade created in the moment before the cache
	// sees another is still held by the controller (upgradeoverlap.Blocking
	// before it starts), so the cache's lag never lets two upgrades of one
	// Machine progress together.
	Reader client.Reader
}

// SetupWithManager registers the webhook with the manager's webhook server.
func (w MachineUpgrade) SetupWithManager(mgr ctrl.Manager) error {
	w.Reader = mgr.GetClient()
	return ctrl.NewWebhookManagedBy(mgr, &upgradev1alpha1.MachineUpgrade{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new MachineUpgrade, and that it overlaps no
// other.
func (w MachineUpgrade) ValidateCreate(ctx context.Context, u *upgradev1alpha1.MachineUpgrade) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := ValidateSpec(&u.Spec, p)
	if len(errs) == 0 {
		others, ms, err := w.list(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("checking for overlapping MachineUpgrades: %w", err)
		}
		errs = append(errs, Overlap(u, others, ms)...)
	}
	return nil, specerr.Invalid(upgradev1alpha1.GroupVersion, "MachineUpgrade", u.Name, errs)
}

// ValidateUpdate checks a change: the target is immutable, and an abort
// cannot be taken back.
func (w MachineUpgrade) ValidateUpdate(_ context.Context, old, u *upgradev1alpha1.MachineUpgrade) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, u.Spec) {
		return nil, nil
	}
	p := field.NewPath("spec")
	errs := ValidateSpec(&u.Spec, p)
	if !apiequality.Semantic.DeepEqual(old.Spec.Selector, u.Spec.Selector) {
		errs = append(errs, field.Forbidden(p.Child("selector"), "field is immutable (create a new MachineUpgrade instead)"))
	}
	if old.Spec.Image != u.Spec.Image {
		errs = append(errs, field.Forbidden(p.Child("image"), "field is immutable (create a new MachineUpgrade instead)"))
	}
	if old.Spec.Version != u.Spec.Version {
		errs = append(errs, field.Forbidden(p.Child("version"), "field is immutable (create a new MachineUpgrade instead)"))
	}
	if old.Spec.Abort && !u.Spec.Abort {
		errs = append(errs, field.Forbidden(p.Child("abort"), "an abort cannot be taken back"))
	}
	return nil, specerr.Invalid(upgradev1alpha1.GroupVersion, "MachineUpgrade", u.Name, errs)
}

// ValidateDelete allows every deletion.
func (MachineUpgrade) ValidateDelete(context.Context, *upgradev1alpha1.MachineUpgrade) (admission.Warnings, error) {
	return nil, nil
}

// ValidateSpec checks the selector and every check: exactly one of
// expression and console, console in post-checks only, and that it
// compiles.
func ValidateSpec(spec *upgradev1alpha1.MachineUpgradeSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sel, err := metav1.LabelSelectorAsSelector(&spec.Selector); err != nil {
		errs = append(errs, field.Invalid(p.Child("selector"), spec.Selector, err.Error()))
	} else if sel.Empty() {
		errs = append(errs, field.Invalid(p.Child("selector"), spec.Selector, "must select something: an empty selector would upgrade every Machine of the namespace"))
	}
	for i, c := range spec.PreChecks {
		if c.Console != "" {
			errs = append(errs, field.Invalid(p.Child("preChecks").Index(i).Child("console"), c.Console,
				"a console check is a post-check only: it looks at what the new image printed after the power cycle"))
		}
		errs = append(errs, validateCheck(c, p.Child("preChecks").Index(i))...)
	}
	for i, c := range spec.PostChecks {
		errs = append(errs, validateCheck(c, p.Child("postChecks").Index(i))...)
	}
	return errs
}

// validateCheck checks that exactly one of expression and console is set
// and that it compiles (CEL, or an RE2 regular expression).
func validateCheck(c upgradev1alpha1.Check, p *field.Path) field.ErrorList {
	switch {
	case c.Expression != "" && c.Console != "":
		return field.ErrorList{field.Invalid(p.Child("console"), c.Console, "exactly one of expression and console must be set")}
	case c.Expression == "" && c.Console == "":
		return field.ErrorList{field.Required(p.Child("expression"), "exactly one of expression and console must be set")}
	case c.Console != "":
		if _, err := regexp.Compile(c.Console); err != nil {
			return field.ErrorList{field.Invalid(p.Child("console"), c.Console, "not a regular expression (RE2): "+err.Error())}
		}
	default:
		if _, err := upgradecheck.Compile(c.Expression); err != nil {
			return field.ErrorList{field.Invalid(p.Child("expression"), c.Expression, err.Error())}
		}
	}
	return nil
}

// list returns the MachineUpgrades of u's namespace and, when there are
// any, the Machines of the namespace that u selects.
func (w MachineUpgrade) list(ctx context.Context, u *upgradev1alpha1.MachineUpgrade) ([]upgradev1alpha1.MachineUpgrade, []machinev1alpha1.Machine, error) {
	others := &upgradev1alpha1.MachineUpgradeList{}
	if err := w.Reader.List(ctx, others, client.InNamespace(u.Namespace)); err != nil {
		return nil, nil, err
	}
	if len(others.Items) == 0 {
		return nil, nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(&u.Spec.Selector)
	if err != nil {
		return nil, nil, err
	}
	ms := &machinev1alpha1.MachineList{}
	if err := w.Reader.List(ctx, ms, client.InNamespace(u.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, nil, err
	}
	return others.Items, ms.Items, nil
}

// Overlap refuses u, naming spec.selector, when it overlaps another
// MachineUpgrade: others are the MachineUpgrades of u's namespace and ms
// the Machines u selects (as listed by the webhook).
func Overlap(u *upgradev1alpha1.MachineUpgrade, others []upgradev1alpha1.MachineUpgrade, ms []machinev1alpha1.Machine) field.ErrorList {
	if msg := overlap(u, others, ms); msg != "" {
		return field.ErrorList{field.Forbidden(field.NewPath("spec", "selector"), msg)}
	}
	return nil
}

// overlap names the first unfinished MachineUpgrade of others (oldest
// first, then by name; u itself is skipped) that selects one of ms, or
// lists it in its status, or returns "" (upgradeoverlap.First).
func overlap(u *upgradev1alpha1.MachineUpgrade, others []upgradev1alpha1.MachineUpgrade, ms []machinev1alpha1.Machine) string {
	if c := upgradeoverlap.First(u, others, ms, upgradeoverlap.Any); c != nil {
		return c.Message()
	}
	return ""
}
