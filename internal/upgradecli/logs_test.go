package upgradecli_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/upgradecli"
)

var env *testenv.Environment

// No controller runs: the tests write the statuses a provider and the
// upgrade controller would.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.Options{NoManager: true}, &env)) }

// TestLogsPrintsEachMachinesConsole: in the upgrade's order, each Machine's
// header and the end of its console; a console on another host and a
// provider without one are said, not skipped.
func TestLogsPrintsEachMachinesConsole(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	dir := t.TempDir()
	var console strings.Builder
	for i := range 30 {
		fmt.Fprintf(&console, "line %02d\n", i)
	}
	here := filepath.Join(dir, "console.log")
	g.Expect(os.WriteFile(here, []byte(console.String()), 0o600)).To(Succeed())
	consoles := map[string]string{"b-here": here, "a-elsewhere": filepath.Join(dir, "gone", "console.log"), "c-none": ""}
	for name, path := range consoles {
		m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pool": "w"}},
			Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
				APIVersion: "infrastructure.converge.dev/v1alpha1", Kind: "KwokMachine", Name: name}}}
		g.Expect(env.Client.Create(ctx, m)).To(Succeed())
		m.Status.ConsoleLog = path
		g.Expect(env.Client.Status().Update(ctx, m)).To(Succeed())
	}
	u := &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "up"},
		Spec: upgradev1alpha1.MachineUpgradeSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "w"}}, Image: "busybox", Version: "2.0"}}
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	var out bytes.Buffer
	g.Expect(upgradecli.Logs(ctx, env.Client, &out, ns, "up", 5)).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("has selected no Machine yet"))

	u.Status.Machines = []upgradev1alpha1.MachineProgress{
		{Name: "b-here", State: upgradev1alpha1.MachineUpgrading, Step: upgradev1alpha1.StepWaitForBoot, StepState: upgradev1alpha1.StepStateRunning},
		{Name: "a-elsewhere", State: upgradev1alpha1.MachineUpgraded},
		{Name: "c-none", State: upgradev1alpha1.MachinePending},
	}
	g.Expect(env.Client.Status().Update(ctx, u)).To(Succeed())
	out.Reset()
	g.Expect(upgradecli.Logs(ctx, env.Client, &out, ns, "up", 5)).To(Succeed())
	want := "== Machine b-here: Upgrading, step WaitForBoot Running\nline 25\nline 26\nline 27\nline 28\nline 29\n\n" +
		"== Machine a-elsewhere: Upgraded, step - -\n(console " + consoles["a-elsewhere"] + " is on the host that runs the machine, not on this one)\n\n" +
		"== Machine c-none: Pending, step - -\n(its provider KwokMachine keeps no console)\n"
	g.Expect(out.String()).To(Equal(want))
	out.Reset()
	g.Expect(upgradecli.Logs(ctx, env.Client, &out, ns, "up", 0)).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("line 00\n"), "--tail 0 prints the whole console")
}
