package security

import (
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
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
