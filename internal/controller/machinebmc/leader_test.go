package machinebmc_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc/ipmi"
	"github.com/converge-dev/converge/internal/leaderfence"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// Two replicas with leader election: only the leader serves the BMC (the
// standby never binds its ports, so the published endpoint does not move
// while both run), and when the leader stops the standby takes over and
// serves it again.
func TestOnlyTheLeaderServes(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()
	shard := "bmc-ha"
	labels := map[string]string{setup.ShardLabel: shard}
	replica := func(o *setup.Options) {
		o.Controllers = []string{"machinebmc"}
		o.ShardKey = shard
		o.LeaderElection = true
		o.LeaderElectionNamespace = ns
		o.LeaderElectionID = "bmc-ha"
		o.LeaderElectionTimings = leaderfence.Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	}
	stopA := env.StartManager(t, replica)
	defer func() { _ = stopA() }()

	// A Machine no provider serves: the BMC needs it to exist only.
	g.Expect(env.Client.Create(ctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Labels: labels},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: "m"}}})).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
		StringData: map[string]string{"username": "admin", "password": "pw-12345"}})).To(Succeed())
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Labels: labels}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "m"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "m"},
		Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolIPMI}}}
	g.Expect(env.Client.Create(ctx, b)).To(Succeed())
	b = waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
	})
	ep := b.Status.IPMIEndpoint
	answers := func() error {
		cur := &bmcv1alpha1.MachineBMC{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return err
		}
		ep := cur.Status.IPMIEndpoint
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		c, err := ipmi.Dial(ctx, ep, "admin", "pw-12345", ipmi.CipherSuite17)
		if err != nil {
			return err
		}
		_, err = c.DeviceID(ctx)
		_ = c.Close(ctx)
		return err
	}
	g.Expect(answers()).To(Succeed())

	stopB := env.StartManager(t, replica)
	defer func() { _ = stopB() }()
	g.Consistently(func(g Gomega) {
		cur := &bmcv1alpha1.MachineBMC{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur)).To(Succeed())
		g.Expect(cur.Status.IPMIEndpoint).To(Equal(ep), "the standby published an endpoint of its own")
	}).WithTimeout(3 * time.Second).Should(Succeed())

	g.Expect(stopA()).To(Succeed())
	// The new leader serves the BMC at the published endpoint: the same
	// port when it is free by then, else a new one it publishes (the old
	// leader may still hold it while it shuts down).
	g.Eventually(answers).WithTimeout(wait).WithPolling(500*time.Millisecond).Should(Succeed(), "the new leader serves the BMC")
}
