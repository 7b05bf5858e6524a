package machineupgrade_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/bmc/bmctest"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// A MachineBMC whose published Redfish endpoint is answered by an impostor
// (another certificate, not issued by the BMC CA) fails the PowerCycle step
// with a message naming the certificate problem, and the impostor never
// receives a request: no credentials (no Authorization header), no reset.
// That the MachineBMC's status.redfishCABundle names the impostor's
// certificate changes nothing: the controller trusts the CA Secret only.
func TestImpostorBMCGetsNothing(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()
	// No machinebmc controller: the test publishes the BMC's endpoint.
	env.StartManager(t, func(o *setup.Options) { o.Controllers = []string{"machine", "kwokmachine", "machineupgrade"} })
	// The CA a BMC server made at its first start (made here when no
	// manager of this suite made it yet).
	_, _, err := bmc.LoadOrCreateCA(ctx, env.Client, env.Client, setup.BMCOptions{}.CASecretKey())
	g.Expect(err).NotTo(HaveOccurred())
	imp := bmctest.StartImpostor(t, nil)

	name := "imp-0"
	g.Expect(env.Client.Create(ctx, &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	m := &machinev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pool": "imp"}},
		Spec: machinev1alpha1.MachineSpec{
			InfrastructureRef: machinev1alpha1.InfrastructureReference{APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: name},
			Image:             "v1", Version: "1.0",
		},
	}
	g.Expect(env.Client.Create(ctx, m)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-bmc"},
		Data: map[string][]byte{bmcv1alpha1.UsernameKey: []byte("admin"), bmcv1alpha1.PasswordKey: []byte("s3cret-bmc")}})).To(Succeed())
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: bmcv1alpha1.MachineBMCSpec{
			MachineRef:    bmcv1alpha1.LocalObjectReference{Name: name},
			AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: name + "-bmc"},
			Protocols:     []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish},
		}}
	g.Expect(env.Client.Create(ctx, b)).To(Succeed())
	base := b.DeepCopy()
	b.Status.RedfishEndpoint = imp.URL
	b.Status.RedfishCABundle = string(pki.EncodeCert(imp.Certificate().Raw))
	g.Expect(env.Client.Status().Patch(ctx, b, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &machinev1alpha1.Machine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
	}).WithTimeout(wait).Should(Succeed())

	u := newUpgrade(ns, "imp", "imp", 1)
	u.Spec.Strategy.MaxAttempts = 1
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		if requests := imp.Requests(); len(requests) > 0 {
			StopTrying(fmt.Sprintf("the impostor received requests (credentials included): %q", requests)).Now()
		}
		testenv.HasCondition(g, u.Status.Conditions, upgradev1alpha1.StalledCondition, metav1.ConditionTrue, upgradev1alpha1.StepFailedReason)
	})
	stalled := conditionMessage(u, upgradev1alpha1.StalledCondition)
	g.Expect(stalled).To(ContainSubstring("Machine imp-0: step PowerCycle failed 1 time(s)"))
	g.Expect(stalled).To(ContainSubstring("the BMC's certificate does not verify against the BMC CA (Secret converge-system/converge-bmc-ca) for host 127.0.0.1, nothing sent"))
	g.Expect(stalled).To(ContainSubstring("x509: certificate signed by unknown authority"))
	g.Expect(u.Status.Machine(name).Step).To(Equal(upgradev1alpha1.StepPowerCycle))

	g.Expect(imp.Requests()).To(BeEmpty(), "the impostor received requests (credentials included)")
	g.Expect(imp.ErrorLog()).To(ContainSubstring("TLS handshake error"), "the controller did dial the impostor, and ended the handshake")
	got := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
	g.Expect(got.EffectivePowerState()).To(Equal(machinev1alpha1.PowerOn), "no reset reached the Machine")
	time.Sleep(time.Second)
	g.Expect(imp.Requests()).To(BeEmpty())
}
