package security

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// A tenant's Machine cannot take over another tenant's provider object: the
// reference has no namespace, a smuggled one is dropped by the schema, and
// the name is looked up in the Machine's namespace only.
func TestMachineCannotReachAnotherNamespace(t *testing.T) {
	victim, attacker := newTenant(t), newTenant(t)
	g := NewWithT(t)
	km := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "target"}}
	g.Expect(victim.Client.Create(t.Context(), km)).To(Succeed())

	m := &unstructured.Unstructured{}
	raw := `{"apiVersion":"machine.converge.dev/v1alpha1","kind":"Machine","metadata":{"name":"grab","namespace":"` + attacker.NS + `"},
	  "spec":{"infrastructureRef":{"apiVersion":"infrastructure.converge.dev/v1alpha1","kind":"KwokMachine","name":"target","namespace":"` + victim.NS + `"}}}`
	g.Expect(json.Unmarshal([]byte(raw), &m.Object)).To(Succeed())
	g.Expect(attacker.Client.Create(t.Context(), m)).To(Succeed())

	got := &machinev1alpha1.Machine{}
	g.Eventually(func(g Gomega) {
		g.Expect(attacker.Client.Get(t.Context(), client.ObjectKey{Namespace: attacker.NS, Name: "grab"}, got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, machinev1alpha1.InfrastructureReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(machinev1alpha1.InfrastructureNotFoundReason))
		g.Expect(c.Message).To(ContainSubstring(attacker.NS + "/target"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(victim.Client.Get(t.Context(), client.ObjectKeyFromObject(km), km)).To(Succeed())
		g.Expect(km.OwnerReferences).To(BeEmpty(), "the victim's KwokMachine was never taken over")
		g.Expect(km.Spec.PowerState).To(BeEmpty(), "nor written to")
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

// A QemuMachine's image cannot name a path out of the image store: the
// schema refuses it before any controller sees it (and internal/qemu
// refuses it again, TestImageOutsideStoreRefused).
func TestQemuMachineImageCannotLeaveTheStore(t *testing.T) {
	tn := newTenant(t)
	for _, image := range []string{"../../etc", "/etc/shadow", "a/b"} {
		qm := &infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "escape"}}
		qm.Spec.Image = image
		err := tn.Client.Create(t.Context(), qm)
		NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue(), "image %q: %v", image, err)
		NewWithT(t).Expect(err.Error()).To(ContainSubstring("spec.image"))
	}
}

// apiserverWatches sums the API server's open WATCH requests on resource
// (apiserver_longrunning_requests): an informer the manager starts on it
// shows as one more.
func apiserverWatches(t *testing.T, resource string) float64 {
	t.Helper()
	raw, err := env.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `resource="`+resource+`"`) ||
			!strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// machineNaming builds a tenant's Machine whose infrastructureRef names
// apiVersion/kind/name.
func machineNaming(ns, name, apiVersion, kind, ref string) *machinev1alpha1.Machine {
	return &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{APIVersion: apiVersion, Kind: kind, Name: ref}}}
}

// A Machine naming a core kind (v1 Node) is refused at admission naming the
// field; one stored around the webhook is Stalled, and the Node it names is
// never owned, cordoned nor deleted, not even when the Machine is deleted.
func TestMachineCannotNameANode(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	victim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "victim-" + tn.NS}, Spec: corev1.NodeSpec{ProviderID: "victim://" + tn.NS}}
	g.Expect(env.Client.Create(ctx, victim)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), victim) })

	m := machineNaming(tn.NS, "grab-node", "v1", "Node", victim.Name)
	err := tn.Client.Create(ctx, m.DeepCopy())
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.infrastructureRef.kind"))

	// Stored before the webhook (or around it): the controller refuses it.
	env.SkipValidationForLabelled(t)
	m.Labels = map[string]string{testenv.NoValidationLabel: "true"}
	g.Eventually(func() error { return tn.Client.Create(ctx, m.DeepCopy()) }).WithTimeout(30 * time.Second).Should(Succeed())
	got := &machinev1alpha1.Machine{}
	g.Eventually(func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
		c := testenv.HasCondition(g, got.Status.Conditions, machinev1alpha1.StalledCondition, metav1.ConditionTrue, machinev1alpha1.InfrastructureContractNotDeclaredReason)
		g.Expect(c.Message).To(ContainSubstring("spec.infrastructureRef.kind"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(got.Status.NodeRef).To(BeNil())

	g.Expect(tn.Client.Delete(ctx, got)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(tn.Client.Get(ctx, client.ObjectKeyFromObject(m), got))
	}).WithTimeout(30*time.Second).Should(BeTrue(), "the Machine goes without touching the Node")
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(victim), victim)).To(Succeed(), "the victim Node is still there")
	g.Expect(victim.OwnerReferences).To(BeEmpty(), "never owned")
	g.Expect(victim.Spec.Unschedulable).To(BeFalse(), "never cordoned")
	g.Expect(victim.DeletionTimestamp).To(BeNil())
}

// A Machine naming kind Secret is refused, and one stored around the
// webhook starts no informer on Secrets (which would cache every Secret of
// the cluster, data included): the API server sees no new watch.
func TestMachineCannotNameASecret(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	m := machineNaming(tn.NS, "grab-secrets", "v1", "Secret", "anything")
	err := tn.Client.Create(ctx, m.DeepCopy())
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.infrastructureRef.kind"))

	before := apiserverWatches(t, "secrets")
	env.SkipValidationForLabelled(t)
	m.Labels = map[string]string{testenv.NoValidationLabel: "true"}
	g.Eventually(func() error { return tn.Client.Create(ctx, m.DeepCopy()) }).WithTimeout(30 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := &machinev1alpha1.Machine{}
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
		testenv.HasCondition(g, got.Status.Conditions, machinev1alpha1.StalledCondition, metav1.ConditionTrue, machinev1alpha1.InfrastructureContractNotDeclaredReason)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func() float64 { return apiserverWatches(t, "secrets") }).WithTimeout(3*time.Second).
		Should(BeNumerically("<=", before), "no informer on Secrets was started")
}

// spec.providerID is the provider's: a KwokMachine (or QemuMachine) given
// another tenant's machine's providerID is refused naming the field; a
// stored one registers nothing, and its Machine never claims the victim's
// Node.
func TestProviderIDCannotBeCopied(t *testing.T) {
	victim, attacker := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	vkm := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "target"}}
	g.Expect(victim.Client.Create(ctx, vkm)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(victim.Client.Get(ctx, client.ObjectKeyFromObject(vkm), vkm)).To(Succeed())
		g.Expect(vkm.Status.NodeName).NotTo(BeEmpty())
		// No kwok here: the Node never turns Ready, and kstatus reads the
		// machine as working towards it.
		testenv.ExpectKstatus(ctx, g, env.Client, vkm, kstatus.InProgressStatus, infrastructurev1alpha1.PoweringReason)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	stolen := vkm.Spec.ProviderID

	for _, obj := range []client.Object{
		&infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "copy"},
			Spec: infrastructurev1alpha1.KwokMachineSpec{MachineSpecFields: infrastructurev1alpha1.MachineSpecFields{ProviderID: stolen}}},
		&infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "copy"},
			Spec: infrastructurev1alpha1.QemuMachineSpec{MachineSpecFields: infrastructurev1alpha1.MachineSpecFields{ProviderID: stolen}}},
	} {
		err := attacker.Client.Create(ctx, obj)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%T: %v", obj, err)
		g.Expect(err.Error()).To(ContainSubstring("spec.providerID"))
	}
	// Nor written later onto the attacker's own objects (one validator
	// serves both kinds, on create and on update).
	for _, obj := range []client.Object{
		&infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "later"}},
		&infrastructurev1alpha1.QemuMachine{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "later"}},
	} {
		g.Expect(attacker.Client.Create(ctx, obj)).To(Succeed())
		patch := []byte(`{"spec":{"providerID":"` + stolen + `"}}`)
		err := attacker.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%T: %v", obj, err)
		g.Expect(err.Error()).To(ContainSubstring("spec.providerID"))
		g.Expect(attacker.Client.Delete(ctx, obj)).To(Succeed())
	}

	// Stored around the webhook, behind a Machine.
	env.SkipValidationForLabelled(t)
	akm := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "copy",
		Labels: map[string]string{testenv.NoValidationLabel: "true"}},
		Spec: infrastructurev1alpha1.KwokMachineSpec{MachineSpecFields: infrastructurev1alpha1.MachineSpecFields{ProviderID: stolen}}}
	g.Eventually(func() error { return attacker.Client.Create(ctx, akm.DeepCopy()) }).WithTimeout(30 * time.Second).Should(Succeed())
	m := machineNaming(attacker.NS, "copy", infrastructurev1alpha1.GroupVersion.String(), "KwokMachine", "copy")
	g.Expect(attacker.Client.Create(ctx, m)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(akm), akm)).To(Succeed())
		testenv.HasCondition(g, akm.Status.Conditions, infrastructurev1alpha1.ReadyCondition, metav1.ConditionFalse, infrastructurev1alpha1.ProviderIDNotOwnReason)
		// Only a person can help: a waiting Sync, Flux or kpt reads it
		// Failed, not InProgress for ever.
		testenv.ExpectKstatus(ctx, g, env.Client, akm, kstatus.FailedStatus, infrastructurev1alpha1.ProviderIDNotOwnReason)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	got := &machinev1alpha1.Machine{}
	g.Consistently(func(g Gomega) {
		g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
		g.Expect(got.Status.NodeRef).To(BeNil(), "the victim's Node is never claimed")
	}).WithTimeout(3 * time.Second).Should(Succeed())

	// Deleting the attacker's Machine leaves the victim's Node alone.
	g.Expect(attacker.Client.Delete(ctx, got)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(attacker.Client.Get(ctx, client.ObjectKeyFromObject(m), got))
	}).WithTimeout(30 * time.Second).Should(BeTrue())
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: vkm.Status.NodeName}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "never cordoned")
	g.Expect(node.DeletionTimestamp).To(BeNil(), "never deleted")
}

// A KwokMachine's Node is its tenant's: labelled and tainted with the
// namespace, and named apart from another namespace's same-named one (and
// from a namespace/name pair that joins to the same string).
func TestKwokNodesAreTheTenants(t *testing.T) {
	a, b := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	nodeOf := func(tn *tenant, name string) *corev1.Node {
		km := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name}}
		g.Expect(tn.Client.Create(ctx, km)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(km), km)).To(Succeed())
			g.Expect(km.Status.NodeName).NotTo(BeEmpty())
		}).WithTimeout(30 * time.Second).Should(Succeed())
		n := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: km.Status.NodeName}, n)).To(Succeed())
		return n
	}
	na, nb := nodeOf(a, "same"), nodeOf(b, "same")
	g.Expect(na.Name).NotTo(Equal(nb.Name))
	for _, c := range []struct {
		n  *corev1.Node
		ns string
	}{{na, a.NS}, {nb, b.NS}} {
		g.Expect(c.n.Labels).To(HaveKeyWithValue("machine.converge.dev/namespace", c.ns))
		g.Expect(c.n.Spec.Taints).To(ContainElement(corev1.Taint{Key: "machine.converge.dev/namespace", Value: c.ns, Effect: corev1.TaintEffectNoSchedule}))
	}
	// "<a.NS>-x" / "y" and "<a.NS>" / "x-y" join to the same string.
	g.Expect(nodeOf(a, "x-y").Name).NotTo(Equal(kwokNodeNameJoin(a.NS, "x-y")), "the name carries a hash of namespace/name")
}

// kwokNodeNameJoin is the old, ambiguous scheme kwok-<namespace>-<name>.
func kwokNodeNameJoin(ns, name string) string { return "kwok-" + ns + "-" + name }

// A Database's instanceRef resolves only to a kind declaring the
// database-instance contract: naming Secret is refused at admission, and a
// stored one is Stalled without any informer on Secrets.
func TestDatabaseInstanceRefCannotNameASecret(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	d := &sqlv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "grab"},
		Spec: sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: "v1", Kind: "Secret", Name: "anything"}}}
	err := tn.Client.Create(ctx, d.DeepCopy())
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.instanceRef.kind"))

	before := apiserverWatches(t, "secrets")
	env.SkipValidationForLabelled(t)
	d.Labels = map[string]string{testenv.NoValidationLabel: "true"}
	g.Eventually(func() error { return tn.Client.Create(ctx, d.DeepCopy()) }).WithTimeout(30 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := &sqlv1alpha1.Database{}
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(d), got)).To(Succeed())
		c := testenv.HasCondition(g, got.Status.Conditions, sqlv1alpha1.StalledCondition, metav1.ConditionTrue, sqlv1alpha1.InstanceContractNotDeclaredReason)
		g.Expect(c.Message).To(ContainSubstring("spec.instanceRef.kind"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func() float64 { return apiserverWatches(t, "secrets") }).WithTimeout(3*time.Second).
		Should(BeNumerically("<=", before), "no informer on Secrets was started")
}
