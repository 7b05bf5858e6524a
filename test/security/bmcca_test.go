package security

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/bmc/bmctest"
	"github.com/converge-dev/converge/internal/setup"
)

// A tenant cannot make the MachineUpgrade controller trust a CA of its
// choosing, and so cannot have a BMC impostor of its own receive an
// upgrade's power cycle and the BMC credentials sent with it. The trust
// anchor is the CA Secret in the manager's namespace, which a tenant can
// neither create, change nor delete; the MachineBMC's status (where the
// bundle is published) is not the tenant's to write; a Secret of the same
// name in the tenant's namespace is never read. And even a status that
// names the impostor and publishes the attacker's CA (written here as an
// administrator, which a tenant is not) gets the impostor nothing: the
// power cycle fails on the certificate, before any request.
func TestTenantCannotMakeTheUpgradeTrustAnotherCA(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	key := setup.BMCOptions{}.CASecretKey()

	// The attacker's CA, and an impostor serving a certificate it issued
	// for the address the controller dials.
	evil, err := bmc.NewCA()
	g.Expect(err).NotTo(HaveOccurred())
	served, err := evil.IssueServing([]string{"127.0.0.1"}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	leaf, err := served.KeyPair()
	g.Expect(err).NotTo(HaveOccurred())
	imp := bmctest.StartImpostor(t, leaf)

	// The trust anchor is out of reach.
	evilSecret := func(ns string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: evil.CACert, corev1.TLSPrivateKeyKey: evil.CAKey, bmc.CABundleKey: evil.CACert}}
	}
	real := &corev1.Secret{}
	g.Eventually(func() error { return env.Client.Get(ctx, key, real) }).WithTimeout(30*time.Second).Should(Succeed(), "the manager made its BMC CA")
	g.Expect(apierrors.IsForbidden(tn.Client.Create(ctx, evilSecret(key.Namespace)))).To(BeTrue(), "a tenant created a Secret in the manager's namespace")
	g.Expect(apierrors.IsForbidden(tn.Client.Delete(ctx, real.DeepCopy()))).To(BeTrue(), "a tenant deleted the BMC CA Secret")
	patched := real.DeepCopy()
	patched.Data = evilSecret(key.Namespace).Data
	g.Expect(apierrors.IsForbidden(tn.Client.Update(ctx, patched))).To(BeTrue(), "a tenant replaced the BMC CA")
	// A Secret of the name in its own namespace is the tenant's to make,
	// and is not read.
	g.Expect(tn.Client.Create(ctx, evilSecret(tn.NS))).To(Succeed())

	// The tenant's Machine and MachineBMC, served by a manager of their own
	// shard (the upgrade controller only: nothing rewrites the BMC status).
	shard := "bmc-ca-attack"
	labels := map[string]string{setup.ShardLabel: shard}
	env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"machineupgrade"}
		o.ShardKey = shard
	})
	g.Expect(tn.Client.Create(ctx, &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"}})).To(Succeed())
	g.Expect(tn.Client.Create(ctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m",
		Labels: map[string]string{setup.ShardLabel: shard, "pool": "attack"}},
		Spec: machinev1alpha1.MachineSpec{Image: "v1", InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: "m"}}})).To(Succeed())
	g.Expect(tn.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m-bmc"},
		StringData: map[string]string{"username": "admin", "password": "tenant-pw"}})).To(Succeed())
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m", Labels: labels}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "m"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "m-bmc"},
		Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish}}}
	g.Expect(tn.Client.Create(ctx, b)).To(Succeed())
	base := b.DeepCopy()
	b.Status.RedfishEndpoint = imp.URL
	b.Status.RedfishCABundle = string(evil.CACert)
	g.Expect(apierrors.IsForbidden(tn.Client.Status().Patch(ctx, b, client.MergeFrom(base)))).To(BeTrue(), "a tenant wrote its MachineBMC's status")
	g.Expect(env.Client.Status().Patch(ctx, b, client.MergeFrom(base))).To(Succeed())

	u := &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "u", Labels: labels},
		Spec: upgradev1alpha1.MachineUpgradeSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "attack"}},
			Image:    "v2", Version: "2.0",
			Strategy: upgradev1alpha1.UpgradeStrategy{MaxUnavailable: 1, MaxAttempts: 1},
		}}
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	g.Eventually(func(g Gomega) {
		if r := imp.Requests(); len(r) > 0 {
			StopTrying(fmt.Sprintf("the impostor received requests: %q", r)).Now()
		}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(u), u)).To(Succeed())
		c := meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.StalledCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(upgradev1alpha1.StepFailedReason))
		g.Expect(c.Message).To(ContainSubstring("step PowerCycle failed"))
		g.Expect(c.Message).To(ContainSubstring("the BMC's certificate does not verify against the BMC CA (Secret " + key.String() + ")"))
	}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	g.Expect(imp.Requests()).To(BeEmpty(), "the impostor received the credentials")
}
