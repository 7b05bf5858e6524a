package machine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	"github.com/converge-dev/converge/pkg/contract/infrastructuremachine/conformance"
)

// exampleGVK is a third party's provider kind, made by the test: the
// Machine controller has never heard of it.
var exampleGVK = schema.GroupVersionKind{Group: "infra.example.test", Version: "v1", Kind: "ExampleMachine"}

const (
	// holdAnnotation stops the example provider from updating status.
	holdAnnotation = "example.test/hold"
	// violateAnnotation makes it report provisioned without a providerID.
	violateAnnotation = "example.test/violate"
)

func installExampleCRD(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	open := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}
	crd := &apiextensionsv1.CustomResourceDefinition{
		// The label declares the contract: without it no Machine may name
		// the kind.
		ObjectMeta: metav1.ObjectMeta{Name: "examplemachines.infra.example.test",
			Labels: map[string]string{pcontract.Label(pcontract.InfrastructureMachine): pcontract.Version}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: exampleGVK.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "examplemachines", Singular: "examplemachine", Kind: exampleGVK.Kind, ListKind: exampleGVK.Kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": *open, "status": *open},
				}},
			}},
		},
	}
	err := env.Client.Create(t.Context(), crd)
	if err != nil && !isAlreadyExists(err) {
		t.Fatal(err)
	}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(crd), crd)).To(Succeed())
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		g.Expect(established).To(BeTrue())
	}).WithTimeout(wait).Should(Succeed())
}

// runExampleProvider is the third party's controller, as small as a
// provider can be: it reads and writes only contract fields on
// unstructured objects, polling its namespace.
func runExampleProvider(t *testing.T, ns string) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(exampleGVK.GroupVersion().WithKind(exampleGVK.Kind + "List"))
			if err := env.Client.List(ctx, list, client.InNamespace(ns)); err == nil {
				for i := range list.Items {
					exampleReconcile(ctx, &list.Items[i])
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

func exampleReconcile(ctx context.Context, u *unstructured.Unstructured) {
	if u.GetDeletionTimestamp() != nil || u.GetAnnotations()[holdAnnotation] != "" {
		return
	}
	_, violate := u.GetAnnotations()[violateAnnotation]
	if id, _, _ := unstructured.NestedString(u.Object, "spec", "providerID"); id == "" && !violate {
		raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"providerID": "example://" + u.GetNamespace() + "/" + u.GetName()}})
		_ = env.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, raw))
		return
	}
	power, _, _ := unstructured.NestedString(u.Object, "spec", "powerState")
	if power == "" {
		power = "On"
	}
	status := map[string]any{
		"provisioned": true, "powerState": power, "bootDevice": "Disk", "observedGeneration": u.GetGeneration(),
		"addresses":  []any{map[string]any{"type": "InternalIP", "address": "192.0.2.10"}},
		"consoleLog": "/var/log/example/" + u.GetName(),
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Example", "message": "ok",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
	}
	raw, _ := json.Marshal(map[string]any{"status": status})
	_ = env.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, raw))
}

func newExample(t *testing.T, ns, name string, annotations map[string]string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(exampleGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetAnnotations(annotations)
	u.Object["spec"] = map[string]any{}
	NewWithT(t).Expect(env.Client.Create(t.Context(), u)).To(Succeed())
}

func exampleMachine(t *testing.T, ns, name string) *machinev1alpha1.Machine {
	t.Helper()
	m := &machinev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: exampleGVK.GroupVersion().String(), Kind: exampleGVK.Kind, Name: name,
		}},
	}
	NewWithT(t).Expect(env.Client.Create(t.Context(), m)).To(Succeed())
	return m
}

// A third party's kind, made in this test, passes the conformance test, and
// the Machine controller drives it through contract fields alone.
func TestThirdPartyProvider(t *testing.T) {
	testenv.Need(t, env)
	installExampleCRD(t)
	ns := env.NewNamespace(t)
	runExampleProvider(t, ns)
	conformance.Run(t, conformance.Harness{
		Client: env.Client, Namespace: ns, GVK: exampleGVK,
		New: func(t *testing.T, name string) { newExample(t, ns, name, nil) },
	})

	newExample(t, ns, "ex", nil)
	m := exampleMachine(t, ns, "ex")
	got := waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseRunning))
		testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.NodeHealthyCondition, metav1.ConditionFalse, machinev1alpha1.NodeNotFoundReason)
	})
	g := NewWithT(t)
	g.Expect(got.Status.ConsoleLog).To(Equal("/var/log/example/ex"))
	g.Expect(got.Status.Addresses).To(ConsistOf(machinev1alpha1.MachineAddress{Type: "InternalIP", Address: "192.0.2.10"}))

	// The provider stops answering: a power change is in transition.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(exampleGVK)
	g.Expect(env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "ex"}, u)).To(Succeed())
	raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{holdAnnotation: "true"}}})
	g.Expect(env.Client.Patch(t.Context(), u, client.RawPatch(types.MergePatchType, raw))).To(Succeed())
	setPower(t, m, machinev1alpha1.PowerOff)
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.PowerTransitionReason)
		g.Expect(c.Message).To(ContainSubstring("powering Off"))
	})
	raw, _ = json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{holdAnnotation: nil}}})
	g.Expect(env.Client.Patch(t.Context(), u, client.RawPatch(types.MergePatchType, raw))).To(Succeed())
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhasePoweredOff))
	})

	// A provider that breaks the contract is reported, naming the field.
	newExample(t, ns, "bad", map[string]string{violateAnnotation: "true"})
	bad := exampleMachine(t, ns, "bad")
	waitMachine(t, bad, func(g Gomega, m *machinev1alpha1.Machine) {
		c := testenv.HasCondition(g, m.Status.Conditions, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.ContractViolationReason)
		g.Expect(c.Message).To(ContainSubstring("spec.providerID"))
		g.Expect(m.Status.Phase).To(Equal(machinev1alpha1.PhaseFailed))
	})
}
