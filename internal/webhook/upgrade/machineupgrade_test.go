package upgrade_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	webhookupgrade "github.com/converge-dev/converge/internal/webhook/upgrade"
)

var t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func upgrade(name, pool string) *upgradev1alpha1.MachineUpgrade {
	return &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: t0},
		Spec: upgradev1alpha1.MachineUpgradeSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}}, Image: "img", Version: "v2"}}
}

func machines(pool string, n int) []machinev1alpha1.Machine {
	var out []machinev1alpha1.Machine
	for i := range n {
		out = append(out, machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s-%d", pool, i), Labels: map[string]string{"pool": pool}}})
	}
	return out
}

// TestValidateSpec: the selector must parse and select something, and
// every check must compile; each refusal names the field, and the webhook
// refuses such a MachineUpgrade before it lists anything.
func TestValidateSpec(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(s *upgradev1alpha1.MachineUpgradeSpec)
		want   string // empty: valid
	}{
		{"valid", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.PreChecks = []upgradev1alpha1.Check{{Name: "a", Expression: `machine.status.phase == "Running"`}}
			s.PostChecks = s.PreChecks
		}, ""},
		{"empty selector", func(s *upgradev1alpha1.MachineUpgradeSpec) { s.Selector = metav1.LabelSelector{} }, "spec.selector: Invalid value"},
		{"bad selector", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}
		}, "spec.selector: Invalid value"},
		{"bad preCheck", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.PreChecks = []upgradev1alpha1.Check{{Name: "a", Expression: `1 + 1`}}
		}, "spec.preChecks[0].expression"},
		{"bad postCheck", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.PostChecks = []upgradev1alpha1.Check{{Name: "a", Expression: "true"}, {Name: "b", Expression: `machine.status.phase ==`}}
		}, "spec.postChecks[1].expression"},
		{"console postCheck", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.PostChecks = []upgradev1alpha1.Check{{Name: "a", Console: `^converge-image: busybox-v2$`}}
		}, ""},
		{"bad console regexp", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.PostChecks = []upgradev1alpha1.Check{{Name: "a", Expression: "true"}, {Name: "b", Console: `converge-image: (`}}
		}, "spec.postChecks[1].console: Invalid value: \"converge-image: (\": not a regular expression (RE2): error parsing regexp: missing closing )"},
		{"console preCheck", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.PreChecks = []upgradev1alpha1.Check{{Name: "a", Console: `ready`}}
		}, "spec.preChecks[0].console: Invalid value: \"ready\": a console check is a post-check only"},
		{"both expression and console", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.PostChecks = []upgradev1alpha1.Check{{Name: "a", Expression: "true", Console: `ready`}}
		}, "spec.postChecks[0].console: Invalid value: \"ready\": exactly one of expression and console must be set"},
		{"neither expression nor console", func(s *upgradev1alpha1.MachineUpgradeSpec) {
			s.PostChecks = []upgradev1alpha1.Check{{Name: "a"}}
		}, "spec.postChecks[0].expression: Required value: exactly one of expression and console must be set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			u := upgrade("u", "a")
			tt.mutate(&u.Spec)
			errs := webhookupgrade.ValidateSpec(&u.Spec, field.NewPath("spec"))
			if tt.want == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs.ToAggregate()).To(MatchError(ContainSubstring(tt.want)))
			// Refused before any list: the webhook has no Reader here.
			_, err := webhookupgrade.MachineUpgrade{}.ValidateCreate(context.Background(), u)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue())
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// TestOverlap: a new MachineUpgrade selecting a Machine that an unfinished
// one selects (or already lists in its status) is refused naming
// spec.selector and the first such upgrade.
func TestOverlap(t *testing.T) {
	with := func(u *upgradev1alpha1.MachineUpgrade, f func(u *upgradev1alpha1.MachineUpgrade)) *upgradev1alpha1.MachineUpgrade {
		f(u)
		return u
	}
	listing := func(names ...string) func(u *upgradev1alpha1.MachineUpgrade) {
		return func(u *upgradev1alpha1.MachineUpgrade) {
			for _, n := range names {
				u.Status.Machines = append(u.Status.Machines, upgradev1alpha1.MachineProgress{Name: n})
			}
		}
	}
	tests := []struct {
		name   string
		others []*upgradev1alpha1.MachineUpgrade
		want   string // empty: valid
	}{
		{"no other", nil, ""},
		{"other pool", []*upgradev1alpha1.MachineUpgrade{upgrade("o", "b")}, ""},
		{"pending", []*upgradev1alpha1.MachineUpgrade{upgrade("o", "a")}, "spec.selector: Forbidden: MachineUpgrade o (phase Pending) already upgrades Machine(s) a-0, a-1; wait"},
		{"upgrading", []*upgradev1alpha1.MachineUpgrade{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) { u.Status.Phase = upgradev1alpha1.PhaseUpgrading })}, "(phase Upgrading)"},
		{"failed", []*upgradev1alpha1.MachineUpgrade{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) { u.Status.Phase = upgradev1alpha1.PhaseFailed })}, "(phase Failed)"},
		{"succeeded", []*upgradev1alpha1.MachineUpgrade{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) { u.Status.Phase = upgradev1alpha1.PhaseSucceeded })}, ""},
		{"being deleted", []*upgradev1alpha1.MachineUpgrade{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) {
			u.DeletionTimestamp, u.Finalizers = &t0, []string{"x"}
		})}, ""},
		{"being deleted, its cordons not yet taken back", []*upgradev1alpha1.MachineUpgrade{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) {
			u.DeletionTimestamp, u.Finalizers = &t0, []string{"x", upgradev1alpha1.MachineUpgradeFinalizer}
			u.Status.Phase = upgradev1alpha1.PhaseUpgrading
		})}, "spec.selector: Forbidden: MachineUpgrade o (phase Upgrading, being deleted) still upgrades Machine(s) a-0, a-1; wait until it is gone"},
		{"itself", []*upgradev1alpha1.MachineUpgrade{upgrade("u", "a")}, ""},
		{"unparseable selector", []*upgradev1alpha1.MachineUpgrade{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) {
			u.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}
		})}, ""},
		{"status lists the Machine", []*upgradev1alpha1.MachineUpgrade{with(upgrade("o", "b"), listing("a-1"))}, "already upgrades Machine(s) a-1;"},
		{"status lists other Machines", []*upgradev1alpha1.MachineUpgrade{with(upgrade("o", "a"), listing("b-0"))}, ""},
		{"oldest first", []*upgradev1alpha1.MachineUpgrade{upgrade("z", "a"), with(upgrade("b", "a"), func(u *upgradev1alpha1.MachineUpgrade) {
			u.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
		})}, "MachineUpgrade z "},
		{"then by name", []*upgradev1alpha1.MachineUpgrade{upgrade("z", "a"), upgrade("b", "a")}, "MachineUpgrade b "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var others []upgradev1alpha1.MachineUpgrade
			for _, o := range tt.others {
				others = append(others, *o)
			}
			// a-0 and a-1: the Machines u (pool a) selects.
			errs := webhookupgrade.Overlap(upgrade("u", "a"), others, machines("a", 2))
			if tt.want == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).To(HaveLen(1))
			g.Expect(errs.ToAggregate()).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// TestOverlapNamesFiveMachines: past five shared Machines the message
// counts the rest.
func TestOverlapNamesFiveMachines(t *testing.T) {
	g := NewWithT(t)
	errs := webhookupgrade.Overlap(upgrade("u", "a"), []upgradev1alpha1.MachineUpgrade{*upgrade("o", "a")}, machines("a", 7))
	g.Expect(errs.ToAggregate()).To(MatchError(ContainSubstring("Machine(s) a-0, a-1, a-2, a-3, a-4, and 2 more;")))
}

// TestOverlapListFails: when the MachineUpgrades cannot be listed (the
// API server is unreachable) the creation is refused with an error, not
// admitted.
func TestOverlapListFails(t *testing.T) {
	g := NewWithT(t)
	_, err := webhookupgrade.MachineUpgrade{Reader: testenv.UnreachableClient(t, upgradev1alpha1.AddToScheme)}.ValidateCreate(context.Background(), upgrade("u", "a"))
	g.Expect(err).To(MatchError(ContainSubstring("checking for overlapping MachineUpgrades: ")))
	g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
}

// TestValidateUpdate: selector, image and version are immutable and an
// abort cannot be taken back; each refusal names the field.
func TestValidateUpdate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(old, cur *upgradev1alpha1.MachineUpgradeSpec)
		want   string // empty: valid
	}{
		{"metadata only", func(_, _ *upgradev1alpha1.MachineUpgradeSpec) {}, ""},
		{"pause", func(_, cur *upgradev1alpha1.MachineUpgradeSpec) { cur.Paused = true }, ""},
		{"abort", func(_, cur *upgradev1alpha1.MachineUpgradeSpec) { cur.Abort = true }, ""},
		{"selector", func(_, cur *upgradev1alpha1.MachineUpgradeSpec) { cur.Selector.MatchLabels["pool"] = "b" }, "spec.selector: Forbidden"},
		{"image", func(_, cur *upgradev1alpha1.MachineUpgradeSpec) { cur.Image = "img2" }, "spec.image: Forbidden"},
		{"version", func(_, cur *upgradev1alpha1.MachineUpgradeSpec) { cur.Version = "v3" }, "spec.version: Forbidden"},
		{"unabort", func(old, _ *upgradev1alpha1.MachineUpgradeSpec) { old.Abort = true }, "spec.abort: Forbidden"},
		{"bad check", func(_, cur *upgradev1alpha1.MachineUpgradeSpec) {
			cur.PreChecks = []upgradev1alpha1.Check{{Name: "a", Expression: "1 + 1"}}
		}, "spec.preChecks[0].expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			old := upgrade("u", "a")
			cur := old.DeepCopy()
			cur.Labels = map[string]string{"x": "y"}
			tt.mutate(&old.Spec, &cur.Spec)
			_, err := webhookupgrade.MachineUpgrade{}.ValidateUpdate(context.Background(), old, cur)
			if tt.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}
