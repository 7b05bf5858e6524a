package machineupgrade_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

const wait = 90 * time.Second

// fleet makes n KwokMachines with Machines (image v1, version 1.0, label
// pool=<pool>), each with a MachineBMC serving Redfish, and waits until
// every Machine runs and every BMC is Ready.
func fleet(t *testing.T, ns, pool string, n int) []*machinev1alpha1.Machine {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	var out []*machinev1alpha1.Machine
	for i := range n {
		name := fmt.Sprintf("%s-%d", pool, i)
		km := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		g.Expect(env.Client.Create(ctx, km)).To(Succeed())
		m := &machinev1alpha1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pool": pool}},
			Spec: machinev1alpha1.MachineSpec{
				InfrastructureRef: machinev1alpha1.InfrastructureReference{APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: name},
				Image:             "v1", Version: "1.0",
			},
		}
		g.Expect(env.Client.Create(ctx, m)).To(Succeed())
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-bmc"},
			Data: map[string][]byte{bmcv1alpha1.UsernameKey: []byte("admin"), bmcv1alpha1.PasswordKey: []byte("s3cret-bmc")}}
		g.Expect(env.Client.Create(ctx, sec)).To(Succeed())
		b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: bmcv1alpha1.MachineBMCSpec{
				MachineRef:    bmcv1alpha1.LocalObjectReference{Name: name},
				AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: name + "-bmc"},
				Protocols:     []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish},
			}}
		g.Expect(env.Client.Create(ctx, b)).To(Succeed())
		out = append(out, m)
	}
	for _, m := range out {
		g.Eventually(func(g Gomega) {
			got := &machinev1alpha1.Machine{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
			g.Expect(got.Status.NodeRef).NotTo(BeNil())
			node := &corev1.Node{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: got.Status.NodeRef.Name}, node)).To(Succeed())
			g.Expect(node.Annotations).To(HaveKeyWithValue(upgradev1alpha1.BootedImageAnnotation, "v1"))
			g.Expect(node.Annotations).To(HaveKeyWithValue(upgradev1alpha1.BootedVersionAnnotation, "1.0"))
			b := &bmcv1alpha1.MachineBMC{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), b)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(b.Status.Conditions, bmcv1alpha1.ReadyCondition)).To(BeTrue())
		}).WithTimeout(wait).WithPolling(100 * time.Millisecond).Should(Succeed())
	}
	return out
}

func newUpgrade(ns, name, pool string, maxUnavailable int32) *upgradev1alpha1.MachineUpgrade {
	return &upgradev1alpha1.MachineUpgrade{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: upgradev1alpha1.MachineUpgradeSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
			Image:    "v2", Version: "2.0",
			Strategy:  upgradev1alpha1.UpgradeStrategy{MaxUnavailable: maxUnavailable},
			PreChecks: []upgradev1alpha1.Check{{Name: "running", Expression: `machine.status.phase == "Running"`}},
			PostChecks: []upgradev1alpha1.Check{{Name: "new-image-ready",
				Expression: `machine.spec.image == "v2" && node.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`}},
		},
	}
}

func waitUpgrade(t *testing.T, u *upgradev1alpha1.MachineUpgrade, check func(g Gomega, u *upgradev1alpha1.MachineUpgrade)) *upgradev1alpha1.MachineUpgrade {
	t.Helper()
	out := &upgradev1alpha1.MachineUpgrade{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), out)).To(Succeed())
		check(g, out)
	}).WithTimeout(wait).WithPolling(50 * time.Millisecond).Should(Succeed())
	return out
}

// events lists "Reason: note" of the Events in ns about objects of kind
// named name (any name when name is "").
func events(g Gomega, t *testing.T, ns, kind, name string) []string {
	l, err := env.Clientset.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, e := range l.Items {
		if e.Regarding.Kind == kind && (name == "" || e.Regarding.Name == name) {
			n := e.DeprecatedCount
			if e.Series != nil {
				n = e.Series.Count
			}
			if n == 0 {
				n = 1
			}
			for range n {
				out = append(out, e.Reason+": "+e.Note)
			}
		}
	}
	sort.Strings(out)
	return out
}

// redfishResets counts the BMC's Events "Redfish ComputerSystem.Reset
// <resetType>" on the Machine: each is a reset the BMC accepted.
func redfishResets(g Gomega, t *testing.T, ns, machine, resetType string) int {
	n := 0
	for _, e := range events(g, t, ns, "Machine", machine) {
		if strings.Contains(e, "Redfish ComputerSystem.Reset "+resetType+" ") {
			n++
		}
	}
	return n
}

// need skips without a control plane, makes the test's namespace and
// starts the controllers.
func need(t *testing.T) string {
	t.Helper()
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	startManager(t)
	return ns
}
