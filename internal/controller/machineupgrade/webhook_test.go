package machineupgrade_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// A second MachineUpgrade that selects a Machine an unfinished one selects
// is refused, naming the first; one selecting other Machines is admitted,
// and so is the second once the first is finished. Invalid checks and
// changes of the target are refused naming the field.
func TestWebhook(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t) // no controllers: the upgrades stay as written
	g := NewWithT(t)
	ctx := t.Context()
	for _, pm := range [][2]string{{"w-0", "w"}, {"w-1", "w"}, {"x-0", "x"}} {
		g.Expect(env.Client.Create(ctx, &machinev1alpha1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pm[0], Labels: map[string]string{"pool": pm[1], "name": pm[0]}},
			Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
				APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: pm[0]}},
		})).To(Succeed())
	}
	first := newUpgrade(ns, "first", "w", 1)
	g.Expect(env.Client.Create(ctx, first)).To(Succeed())

	second := newUpgrade(ns, "second", "w", 1)
	second.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{"name": "w-1"}}
	err := env.Client.Create(ctx, second)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring(`spec.selector: Forbidden: MachineUpgrade first (phase Pending) already upgrades Machine(s) w-1`))

	other := newUpgrade(ns, "other", "x", 1)
	g.Expect(env.Client.Create(ctx, other)).To(Succeed())

	bad := newUpgrade(ns, "bad", "none", 1)
	bad.Spec.PreChecks = []upgradev1alpha1.Check{{Name: "typo", Expression: "machine.status.phase =="}}
	err = env.Client.Create(ctx, bad)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("spec.preChecks[0].expression: Invalid value"))
	// Console checks: the CRD's CEL rules refuse both or neither of
	// expression and console, and a console pre-check; the webhook refuses
	// a regular expression that does not compile, naming the field.
	both := newUpgrade(ns, "both", "none", 1)
	both.Spec.PostChecks = []upgradev1alpha1.Check{{Name: "both", Expression: "true", Console: "x"}}
	g.Expect(env.Client.Create(ctx, both)).To(MatchError(ContainSubstring("spec.postChecks[0]: Invalid value: exactly one of expression and console must be set")))
	neither := newUpgrade(ns, "neither", "none", 1)
	neither.Spec.PostChecks = []upgradev1alpha1.Check{{Name: "neither"}}
	g.Expect(env.Client.Create(ctx, neither)).To(MatchError(ContainSubstring("exactly one of expression and console must be set")))
	preConsole := newUpgrade(ns, "pre-console", "none", 1)
	preConsole.Spec.PreChecks = []upgradev1alpha1.Check{{Name: "c", Console: "ready"}}
	g.Expect(env.Client.Create(ctx, preConsole)).To(MatchError(ContainSubstring("spec.preChecks: Invalid value: preChecks cannot be console checks")))
	badRE := newUpgrade(ns, "bad-re", "none", 1)
	badRE.Spec.PostChecks = []upgradev1alpha1.Check{{Name: "c", Console: "converge-image: ("}}
	g.Expect(env.Client.Create(ctx, badRE)).To(MatchError(ContainSubstring("spec.postChecks[0].console: Invalid value: \"converge-image: (\": not a regular expression (RE2)")))
	okRE := newUpgrade(ns, "ok-re", "none", 1)
	okRE.Spec.PostChecks = []upgradev1alpha1.Check{{Name: "c", Console: "^converge-image: v2$"}}
	g.Expect(env.Client.Create(ctx, okRE)).To(Succeed())

	empty := newUpgrade(ns, "empty", "none", 1)
	empty.Spec.Selector = metav1.LabelSelector{}
	g.Expect(env.Client.Create(ctx, empty)).To(MatchError(ContainSubstring("must select something")))

	base := first.DeepCopy()
	first.Spec.Image = "v3"
	g.Expect(env.Client.Patch(ctx, first, client.MergeFrom(base))).To(MatchError(ContainSubstring("spec.image: Forbidden: field is immutable")))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(first), first)).To(Succeed())
	base = first.DeepCopy()
	first.Spec.Abort = true
	g.Expect(env.Client.Patch(ctx, first, client.MergeFrom(base))).To(Succeed())
	base = first.DeepCopy()
	first.Spec.Abort = false
	g.Expect(env.Client.Patch(ctx, first, client.MergeFrom(base))).To(MatchError(ContainSubstring("spec.abort: Forbidden: an abort cannot be taken back")))

	// Once the first is finished (here: written as Aborted, as the
	// controller would), the second is admitted.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(first), first)).To(Succeed())
	sbase := first.DeepCopy()
	first.Status.Phase = upgradev1alpha1.PhaseAborted
	g.Expect(env.Client.Status().Patch(ctx, first, client.MergeFrom(sbase))).To(Succeed())
	second.ResourceVersion = ""
	g.Expect(env.Client.Create(ctx, second)).To(Succeed())
}
