package machinebmc_test

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

const wait = 60 * time.Second

func kwokMachine(t *testing.T, ns, name string) *machinev1alpha1.Machine {
	t.Helper()
	g := NewWithT(t)
	km := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	g.Expect(env.Client.Create(t.Context(), km)).To(Succeed())
	m := &machinev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: name,
		}},
	}
	g.Expect(env.Client.Create(t.Context(), m)).To(Succeed())
	return m
}

func secret(t *testing.T, ns, name, user, password string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{bmcv1alpha1.UsernameKey: []byte(user), bmcv1alpha1.PasswordKey: []byte(password)}}
	NewWithT(t).Expect(env.Client.Create(t.Context(), s)).To(Succeed())
	return s
}

func newBMC(t *testing.T, ns, name, machine, secret string) *bmcv1alpha1.MachineBMC {
	t.Helper()
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: bmcv1alpha1.MachineBMCSpec{
			MachineRef:    bmcv1alpha1.LocalObjectReference{Name: machine},
			AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: secret},
		}}
	NewWithT(t).Expect(env.Client.Create(t.Context(), b)).To(Succeed())
	return b
}

// readyBMC makes a Machine, a Secret (admin / s3cret-bmc) and a MachineBMC,
// and waits until the BMC is Ready and the Machine is On.
func readyBMC(t *testing.T, name string) (*bmcv1alpha1.MachineBMC, *machinev1alpha1.Machine) {
	t.Helper()
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	m := kwokMachine(t, ns, name)
	secret(t, ns, name+"-bmc", "admin", "s3cret-bmc")
	b := newBMC(t, ns, name, name, name+"-bmc")
	b = waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.MachineAvailableCondition, metav1.ConditionTrue, bmcv1alpha1.MachineFoundReason)
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.SecretAvailableCondition, metav1.ConditionTrue, bmcv1alpha1.SecretFoundReason)
		g.Expect(b.Status.ObservedGeneration).To(Equal(b.Generation))
	})
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.PowerState).To(Equal(machinev1alpha1.PowerOn))
	})
	return b, m
}

func waitBMC(t *testing.T, b *bmcv1alpha1.MachineBMC, check func(g Gomega, b *bmcv1alpha1.MachineBMC)) *bmcv1alpha1.MachineBMC {
	t.Helper()
	out := &bmcv1alpha1.MachineBMC{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), out)).To(Succeed())
		check(g, out)
		// Whatever state the test waits for, kstatus reads it as the
		// conditions mean it.
		testenv.ExpectKstatusAgrees(t.Context(), g, env.Client, out)
	}).WithTimeout(wait).WithPolling(100 * time.Millisecond).Should(Succeed())
	return out
}

func waitMachine(t *testing.T, m *machinev1alpha1.Machine, check func(g Gomega, m *machinev1alpha1.Machine)) *machinev1alpha1.Machine {
	t.Helper()
	out := &machinev1alpha1.Machine{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), out)).To(Succeed())
		check(g, out)
		// Whatever state the test waits for, kstatus reads it as the
		// conditions mean it.
		testenv.ExpectKstatusAgrees(t.Context(), g, env.Client, out)
	}).WithTimeout(wait).WithPolling(100 * time.Millisecond).Should(Succeed())
	return out
}

// ipmitool runs ipmitool -I lanplus against the BMC's IPMI endpoint.
func ipmitool(t *testing.T, endpoint, pass, suite string, args ...string) (string, error) {
	t.Helper()
	h, p, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	a := append([]string{"-I", "lanplus", "-C", suite, "-H", h, "-p", p, "-U", "admin", "-P", pass, "-R", "2", "-N", "2"}, args...)
	out, err := exec.CommandContext(t.Context(), "ipmitool", a...).CombinedOutput()
	return string(out), err
}

func mustIpmitool(t *testing.T, endpoint, suite string, args ...string) string {
	t.Helper()
	out, err := ipmitool(t, endpoint, "s3cret-bmc", suite, args...)
	if err != nil {
		t.Fatalf("ipmitool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func redfishtool(t *testing.T, endpoint, pass string, args ...string) (string, error) {
	t.Helper()
	a := append([]string{"-r", strings.TrimPrefix(endpoint, "https://"), "-u", "admin", "-p", pass, "-S", "Always", "-T", "10"}, args...)
	out, err := exec.CommandContext(t.Context(), "redfishtool", a...).CombinedOutput()
	return string(out), err
}

// machineEvents are the notes of the Events about m.
func machineEvents(g Gomega, t *testing.T, m *machinev1alpha1.Machine) string {
	l, err := env.Clientset.EventsV1().Events(m.Namespace).List(t.Context(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var notes []string
	for _, e := range l.Items {
		if e.Regarding.Name == m.Name && e.Regarding.Kind == "Machine" {
			notes = append(notes, e.Note)
		}
	}
	return strings.Join(notes, "\n")
}
