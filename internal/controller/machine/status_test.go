package machine

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
)

func TestSetStatus(t *testing.T) {
	infra := &unstructured.Unstructured{}
	infra.SetKind("ExampleMachine")
	infra.SetName("x")
	tests := []struct {
		name        string
		power       machinev1alpha1.PowerState
		scope       scope
		reason      string
		ready       metav1.ConditionStatus
		phase       machinev1alpha1.MachinePhase
		infraReason string
	}{
		{name: "not provisioned", scope: scope{infraStatus: &contract.Status{}},
			reason: machinev1alpha1.ProvisioningReason, ready: metav1.ConditionFalse, phase: machinev1alpha1.PhaseProvisioning, infraReason: machinev1alpha1.ProvisioningReason},
		{name: "running", scope: scope{infraStatus: &contract.Status{Provisioned: true, ProviderID: "p", PowerState: "On"}},
			reason: machinev1alpha1.RunningReason, ready: metav1.ConditionTrue, phase: machinev1alpha1.PhaseRunning, infraReason: machinev1alpha1.ProvisionedReason},
		{name: "powering off", power: machinev1alpha1.PowerOff, scope: scope{infraStatus: &contract.Status{Provisioned: true, ProviderID: "p", PowerState: "On"}},
			reason: machinev1alpha1.PowerTransitionReason, ready: metav1.ConditionFalse, phase: machinev1alpha1.PhaseRunning, infraReason: machinev1alpha1.ProvisionedReason},
		{name: "stale", scope: scope{infraStatus: &contract.Status{Provisioned: true, ProviderID: "p", PowerState: "On", Stale: true}},
			reason: machinev1alpha1.PowerTransitionReason, ready: metav1.ConditionFalse, phase: machinev1alpha1.PhaseRunning, infraReason: machinev1alpha1.ProvisionedReason},
		{name: "off", power: machinev1alpha1.PowerOff, scope: scope{infraStatus: &contract.Status{Provisioned: true, ProviderID: "p", PowerState: "Off"}},
			reason: machinev1alpha1.PoweredOffReason, ready: metav1.ConditionTrue, phase: machinev1alpha1.PhasePoweredOff, infraReason: machinev1alpha1.ProvisionedReason},
		{name: "violation", scope: scope{blockedReason: machinev1alpha1.ContractViolationReason, failed: true},
			reason: machinev1alpha1.ContractViolationReason, ready: metav1.ConditionFalse, phase: machinev1alpha1.PhaseFailed, infraReason: machinev1alpha1.ContractViolationReason},
		{name: "duplicate MAC", scope: scope{duplicateMAC: "taken", infraStatus: &contract.Status{Provisioned: true, ProviderID: "p", PowerState: "On"}},
			reason: machinev1alpha1.DuplicateMACAddressReason, ready: metav1.ConditionFalse, phase: machinev1alpha1.PhaseFailed, infraReason: machinev1alpha1.ProvisionedReason},
		{name: "not found", scope: scope{blockedReason: machinev1alpha1.InfrastructureNotFoundReason},
			reason: machinev1alpha1.InfrastructureNotFoundReason, ready: metav1.ConditionFalse, phase: machinev1alpha1.PhasePending, infraReason: machinev1alpha1.InfrastructureNotFoundReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: machinev1alpha1.MachineSpec{PowerState: tt.power}}
			s := tt.scope
			s.m, s.infra = m, infra
			setStatus(&s, true)
			c := meta.FindStatusCondition(m.Status.Conditions, machinev1alpha1.ReadyCondition)
			g.Expect(c.Reason).To(Equal(tt.reason))
			g.Expect(c.Status).To(Equal(tt.ready))
			g.Expect(c.ObservedGeneration).To(Equal(int64(3)))
			g.Expect(m.Status.Phase).To(Equal(tt.phase))
			g.Expect(meta.FindStatusCondition(m.Status.Conditions, machinev1alpha1.InfrastructureReadyCondition).Reason).To(Equal(tt.infraReason))
			g.Expect(m.Status.ObservedGeneration).To(Equal(int64(3)))
		})
	}
}
