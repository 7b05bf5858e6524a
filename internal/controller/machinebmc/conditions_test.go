package machinebmc_test

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc/ipmi"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/testpeer"
)

// A MachineBMC waits for its Machine and Secret (MachineNotFound,
// SecretNotFound, SecretInvalid), then serves; the endpoints go when the
// MachineBMC does.
func TestConditionsFollowTheReferences(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	b := newBMC(t, ns, "late", "late", "late-bmc")
	waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionFalse, bmcv1alpha1.MachineNotFoundReason)
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.MachineAvailableCondition, metav1.ConditionFalse, bmcv1alpha1.MachineNotFoundReason)
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.SecretAvailableCondition, metav1.ConditionFalse, bmcv1alpha1.SecretNotFoundReason)
		g.Expect(b.Status.IPMIEndpoint).To(BeEmpty())
	})
	kwokMachine(t, ns, "late")
	waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.MachineAvailableCondition, metav1.ConditionTrue, bmcv1alpha1.MachineFoundReason)
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionFalse, bmcv1alpha1.SecretNotFoundReason)
	})
	s := secret(t, ns, "late-bmc", "admin", "")
	waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.SecretAvailableCondition, metav1.ConditionFalse, bmcv1alpha1.SecretInvalidReason)
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionFalse, bmcv1alpha1.SecretInvalidReason)
	})
	s.Data[bmcv1alpha1.PasswordKey] = []byte("pw-12345")
	NewWithT(t).Expect(env.Client.Update(t.Context(), s)).To(Succeed())
	b = waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
		g.Expect(b.Status.IPMIEndpoint).NotTo(BeEmpty())
		g.Expect(b.Status.RedfishEndpoint).NotTo(BeEmpty())
	})
	ep := b.Status.IPMIEndpoint
	NewWithT(t).Expect(env.Client.Delete(t.Context(), b)).To(Succeed())
	NewWithT(t).Eventually(func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		c, err := ipmi.Dial(ctx, ep, "admin", "pw-12345", ipmi.CipherSuite17)
		if err == nil {
			_ = c.Close(ctx)
		}
		return err
	}).WithTimeout(wait).Should(HaveOccurred(), "the BMC of a deleted MachineBMC still answers")
}

// Protocols: a BMC serving Redfish only publishes no IPMI endpoint.
func TestRedfishOnly(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	kwokMachine(t, ns, "r")
	secret(t, ns, "r", "admin", "pw-12345")
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "r"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "r"},
		Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish},
	}}
	NewWithT(t).Expect(env.Client.Create(t.Context(), b)).To(Succeed())
	waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
		g.Expect(b.Status.IPMIEndpoint).To(BeEmpty())
		g.Expect(b.Status.RedfishEndpoint).To(HavePrefix("https://127.0.0.1:"))
	})
}

// Rotating the Secret's password: the old one stops working for IPMI and
// Redfish, the new one works, nothing restarts (the endpoints stay).
func TestPasswordRotation(t *testing.T) {
	testpeer.NeedTool(t, "ipmitool", "ipmitool")
	b, _ := readyBMC(t, "rot")
	g := NewWithT(t)
	s := &corev1.Secret{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: b.Namespace, Name: "rot-bmc"}, s)).To(Succeed())
	s.Data[bmcv1alpha1.PasswordKey] = []byte("r0tated-pw")
	g.Expect(env.Client.Update(t.Context(), s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		out, err := ipmitool(t, b.Status.IPMIEndpoint, "s3cret-bmc", "17", "power", "status")
		g.Expect(err).To(HaveOccurred(), "the old password still works: %s", out)
	}).WithTimeout(wait).Should(Succeed())
	out, err := ipmitool(t, b.Status.IPMIEndpoint, "r0tated-pw", "17", "power", "status")
	g.Expect(err).NotTo(HaveOccurred(), out)
	rsp, _ := rf(t, g, http.MethodGet, b.Status.RedfishEndpoint+"/redfish/v1/Systems", "", nil) // basic auth with s3cret-bmc
	g.Expect(rsp.StatusCode).To(Equal(http.StatusUnauthorized))
	after := waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
	})
	g.Expect(after.Status.IPMIEndpoint).To(Equal(b.Status.IPMIEndpoint), "the BMC was not restarted")
}

// The webhook refuses a protocol named twice and a changed machineRef,
// naming the field.
func TestWebhook(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w"}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "Not_A_Name"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "s"},
	}}
	err := env.Client.Create(t.Context(), b)
	g.Expect(err).To(MatchError(ContainSubstring("spec.machineRef.name")))
	b.Spec.MachineRef.Name = "m"
	g.Expect(env.Client.Create(t.Context(), b)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &bmcv1alpha1.MachineBMC{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), cur)).To(Succeed())
		cur.Spec.MachineRef.Name = "other"
		err := env.Client.Update(t.Context(), cur)
		g.Expect(err).To(MatchError(ContainSubstring("spec.machineRef")))
		g.Expect(err).To(MatchError(ContainSubstring("immutable")))
	}).Should(Succeed())
}

// The samples (the Machine worker-1 and its MachineBMC) work as they are.
func TestSample(t *testing.T) {
	testpeer.NeedTool(t, "ipmitool", "ipmitool")
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"machine_v1alpha1_machine.yaml", "bmc_v1alpha1_machinebmc.yaml"} {
		out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "kubectl"), "--kubeconfig", env.KubeconfigPath,
			"apply", "-n", ns, "-f", filepath.Join("..", "..", "..", "config", "samples", f)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", f, err, out)
		}
	}
	b := waitBMC(t, &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "worker-1"}}, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
	})
	NewWithT(t).Eventually(func(g Gomega) {
		out, err := exec.CommandContext(t.Context(), "ipmitool", "-I", "lanplus", "-C", "17", "-H", "127.0.0.1",
			"-p", strings.TrimPrefix(b.Status.IPMIEndpoint, "127.0.0.1:"), "-U", "admin", "-P", "changeme", "power", "status").CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		g.Expect(string(out)).To(ContainSubstring("Chassis Power is on"))
	}).WithTimeout(wait).Should(Succeed())
}
