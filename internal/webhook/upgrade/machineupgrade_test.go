package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	webhookupgrade "github.com/converge-dev/converge/internal/webhook/upgrade"
)

var t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func upgrade(name, pool string) *upgradev1alpha1.MachineUpgrade {
	return &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: t0},
		Spec: upgradev1alpha1.MachineUpgradeSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}}, Image: "img", Version: "v2"}}
}

func machines(pool string, n int) []client.Object {
	var out []client.Object
	for i := range n {
		out = append(out, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s-%d", pool, i), Labels: map[string]string{"pool": pool}}})
	}
	return out
}

func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := upgradev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := machinev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestValidateSpec: the selector must parse and select something, and
// every check must compile; each refusal names the field.
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			u := upgrade("u", "a")
			tt.mutate(&u.Spec)
			w := webhookupgrade.MachineUpgrade{Reader: fake.NewClientBuilder().WithScheme(newScheme(t)).Build()}
			_, err := w.ValidateCreate(context.Background(), u)
			if tt.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
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
		others []client.Object
		want   string // empty: valid
	}{
		{"no other", nil, ""},
		{"other pool", []client.Object{upgrade("o", "b")}, ""},
		{"pending", []client.Object{upgrade("o", "a")}, "spec.selector: Forbidden: MachineUpgrade o (phase Pending) already upgrades Machine(s) a-0, a-1; wait"},
		{"upgrading", []client.Object{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) { u.Status.Phase = upgradev1alpha1.PhaseUpgrading })}, "(phase Upgrading)"},
		{"failed", []client.Object{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) { u.Status.Phase = upgradev1alpha1.PhaseFailed })}, "(phase Failed)"},
		{"succeeded", []client.Object{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) { u.Status.Phase = upgradev1alpha1.PhaseSucceeded })}, ""},
		{"being deleted", []client.Object{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) {
			u.DeletionTimestamp, u.Finalizers = &t0, []string{"x"}
		})}, ""},
		{"itself", []client.Object{upgrade("u", "a")}, ""},
		{"unparseable selector", []client.Object{with(upgrade("o", "a"), func(u *upgradev1alpha1.MachineUpgrade) {
			u.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}
		})}, ""},
		{"status lists the Machine", []client.Object{with(upgrade("o", "b"), listing("a-1"))}, "already upgrades Machine(s) a-1;"},
		{"status lists other Machines", []client.Object{with(upgrade("o", "a"), listing("b-0"))}, ""},
		{"oldest first", []client.Object{upgrade("z", "a"), with(upgrade("b", "a"), func(u *upgradev1alpha1.MachineUpgrade) {
			u.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
		})}, "MachineUpgrade z "},
		{"then by name", []client.Object{upgrade("z", "a"), upgrade("b", "a")}, "MachineUpgrade b "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			objs := append(machines("a", 2), machines("b", 1)...)
			r := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(append(objs, tt.others...)...).Build()
			_, err := webhookupgrade.MachineUpgrade{Reader: r}.ValidateCreate(context.Background(), upgrade("u", "a"))
			if tt.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// TestOverlapNamesFiveMachines: past five shared Machines the message
// counts the rest.
func TestOverlapNamesFiveMachines(t *testing.T) {
	g := NewWithT(t)
	objs := append(machines("a", 7), upgrade("o", "a"))
	r := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).Build()
	_, err := webhookupgrade.MachineUpgrade{Reader: r}.ValidateCreate(context.Background(), upgrade("u", "a"))
	g.Expect(err).To(MatchError(ContainSubstring("Machine(s) a-0, a-1, a-2, a-3, a-4, and 2 more;")))
}

// TestOverlapListFails: a failed list of the upgrades or of the Machines
// is an error, not an admission.
func TestOverlapListFails(t *testing.T) {
	for _, failing := range []client.ObjectList{&upgradev1alpha1.MachineUpgradeList{}, &machinev1alpha1.MachineList{}} {
		t.Run(fmt.Sprintf("%T", failing), func(t *testing.T) {
			g := NewWithT(t)
			r := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(upgrade("o", "b")).WithInterceptorFuncs(interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if fmt.Sprintf("%T", list) == fmt.Sprintf("%T", failing) {
						return errors.New("down")
					}
					return c.List(ctx, list, opts...)
				},
			}).Build()
			_, err := webhookupgrade.MachineUpgrade{Reader: r}.ValidateCreate(context.Background(), upgrade("u", "a"))
			g.Expect(err).To(MatchError(ContainSubstring("checking for overlapping MachineUpgrades: down")))
		})
	}
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
