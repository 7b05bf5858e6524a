// Package conformance is the infrastructure-machine contract's conformance
// test: a Go test helper that any provider kind (built in or third party)
// runs against a real API server with its controller running, to show that
// the generic Machine controller can drive it. Run it from a test:
//
//	conformance.Run(t, conformance.Harness{
//		Client: c, Namespace: ns,
//		GVK: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "MetalMachine"},
//		New: func(t *testing.T, name string) { /* create the provider object */ },
//	})
//
// It checks what docs/contracts/infrastructure-machine.md promises: the kind
// is namespaced; given spec.powerState On the object reports
// status.provisioned, a spec.providerID, status.powerState On and a True
// Ready condition at the current generation; Off and On again are observed
// with the providerID unchanged; and deleting the object completes.
package conformance

import (
	"testing"
	"time"

	"github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
)

// Harness describes the kind under test.
type Harness struct {
	// Client reaches the API server (uncached).
	Client client.Client
	// Namespace holds the objects the test creates.
	Namespace string
	// GVK is the provider kind.
	GVK schema.GroupVersionKind
	// New creates, in Namespace, a provider object named name with whatever
	// provider-specific spec it needs (the test then sets the contract's
	// spec fields as the Machine controller does).
	New func(t *testing.T, name string)
	// Desired is merged into the contract fields the test writes (image,
	// NICs); its PowerState and BootDevice are set by the test.
	Desired contract.Desired
	// Timeout bounds each wait; 60 s when zero.
	Timeout time.Duration
}

func (h Harness) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return 60 * time.Second
}

func (h Harness) get(t *testing.T, g gomega.Gomega, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(h.GVK)
	g.Expect(h.Client.Get(t.Context(), types.NamespacedName{Namespace: h.Namespace, Name: name}, u)).To(gomega.Succeed())
	return u
}

func (h Harness) setPower(t *testing.T, g gomega.Gomega, name, power string) {
	d := h.Desired
	d.PowerState, d.BootDevice = power, contract.BootDisk
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(h.GVK)
	u.SetNamespace(h.Namespace)
	u.SetName(name)
	patch := client.RawPatch(types.MergePatchType, mustJSON(contract.SpecPatch(d)))
	g.Expect(h.Client.Patch(t.Context(), u, patch)).To(gomega.Succeed(), "writing the contract's spec fields")
}

// waitPower waits for the observed power state at the current generation
// and returns the status read from the object.
func (h Harness) waitPower(t *testing.T, name, power string) contract.Status {
	var st contract.Status
	gomega.NewWithT(t).Eventually(func(g gomega.Gomega) {
		u := h.get(t, g, name)
		var err error
		st, err = contract.Read(u)
		g.Expect(err).NotTo(gomega.HaveOccurred(), "the object honours the contract")
		g.Expect(st.Stale).To(gomega.BeFalse(), "status.observedGeneration is current")
		g.Expect(st.Provisioned).To(gomega.BeTrue(), "status.provisioned")
		g.Expect(st.PowerState).To(gomega.Equal(power), "status.powerState")
		g.Expect(st.Ready).NotTo(gomega.BeNil(), "a Ready condition exists")
		g.Expect(st.Ready.Status).To(gomega.Equal(metav1.ConditionTrue), "Ready is True once the wanted power state is reached")
	}).WithTimeout(h.timeout()).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
	return st
}

// Run runs the conformance tests as subtests of t. They share one object,
// so they run in order and stop at the first failure.
func Run(t *testing.T, h Harness) {
	t.Helper()
	const name = "conformance"
	var providerID string
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"KindIsNamespaced", func(t *testing.T) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(h.GVK)
			namespaced, err := h.Client.IsObjectNamespaced(u)
			gomega.NewWithT(t).Expect(err).NotTo(gomega.HaveOccurred(), "the API server serves %s", h.GVK)
			gomega.NewWithT(t).Expect(namespaced).To(gomega.BeTrue(), "provider kinds are namespaced")
		}},
		{"ProvisionsAndPowersOn", func(t *testing.T) {
			g := gomega.NewWithT(t)
			h.New(t, name)
			h.setPower(t, g, name, contract.PowerOn)
			st := h.waitPower(t, name, contract.PowerOn)
			g.Expect(st.ProviderID).NotTo(gomega.BeEmpty(), "spec.providerID")
			providerID = st.ProviderID
		}},
		{"PowersOffAndOnKeepingProviderID", func(t *testing.T) {
			g := gomega.NewWithT(t)
			h.setPower(t, g, name, contract.PowerOff)
			st := h.waitPower(t, name, contract.PowerOff)
			g.Expect(st.ProviderID).To(gomega.Equal(providerID), "spec.providerID never changes")
			h.setPower(t, g, name, contract.PowerOn)
			st = h.waitPower(t, name, contract.PowerOn)
			g.Expect(st.ProviderID).To(gomega.Equal(providerID), "spec.providerID never changes")
		}},
		{"DeletionCompletes", func(t *testing.T) {
			g := gomega.NewWithT(t)
			u := h.get(t, g, name)
			g.Expect(h.Client.Delete(t.Context(), u)).To(gomega.Succeed())
			g.Eventually(func() bool {
				err := h.Client.Get(t.Context(), client.ObjectKeyFromObject(u), u.DeepCopy())
				return apierrors.IsNotFound(err)
			}).WithTimeout(h.timeout()).WithPolling(200*time.Millisecond).Should(gomega.BeTrue(), "the object is gone (its finalizers done)")
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			return
		}
	}
}
