package machine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

func setCondition(m *machinev1alpha1.Machine, typ string, status metav1.ConditionStatus, reason, msg string) {
	creconcile.SetCondition(&m.Status.Conditions, m.Generation, typ, status, reason, msg)
}

// setStatus turns the observations on s into the Machine's status. It is
// pure: everything it needs is on s. ok is false when the reconcile failed
// (observedGeneration then stays).
func setStatus(s *scope, ok bool) {
	m := s.m
	st := s.infraStatus
	if st != nil {
		m.Status.ProviderID = st.ProviderID
		m.Status.PowerState = machinev1alpha1.PowerState(st.PowerState)
		m.Status.BootDevice = machinev1alpha1.BootDevice(st.BootDevice)
		m.Status.ConsoleLog = st.ConsoleLog
		m.Status.Addresses = nil
		for _, a := range st.Addresses {
			m.Status.Addresses = append(m.Status.Addresses, machinev1alpha1.MachineAddress{Type: a.Type, Address: a.Address})
		}
	}
	setInfrastructureReady(s)
	setNodeHealthy(s)
	setReady(s)
	m.Status.Phase = phase(s)
	if s.failed {
		setCondition(m, machinev1alpha1.StalledCondition, metav1.ConditionTrue, s.blockedReason, s.blockedMessage)
	} else {
		meta.RemoveStatusCondition(&m.Status.Conditions, machinev1alpha1.StalledCondition)
	}
	if ok {
		m.Status.ObservedGeneration = m.Generation
	}
}

func setInfrastructureReady(s *scope) {
	m, st := s.m, s.infraStatus
	switch {
	case s.blockedReason != "" && s.blockedReason != machinev1alpha1.PausedReason:
		setCondition(m, machinev1alpha1.InfrastructureReadyCondition, metav1.ConditionFalse, s.blockedReason, s.blockedMessage)
	case st == nil:
		// Paused before anything was observed: leave it.
	case st.Provisioned:
		setCondition(m, machinev1alpha1.InfrastructureReadyCondition, metav1.ConditionTrue, machinev1alpha1.ProvisionedReason,
			fmt.Sprintf("%s %s is provisioned", s.infra.GetKind(), s.infra.GetName()))
	default:
		msg := fmt.Sprintf("waiting for %s %s to report status.provisioned", s.infra.GetKind(), s.infra.GetName())
		if st.Ready != nil && st.Ready.Message != "" {
			msg += ": " + st.Ready.Reason + ": " + st.Ready.Message
		}
		setCondition(m, machinev1alpha1.InfrastructureReadyCondition, metav1.ConditionFalse, machinev1alpha1.ProvisioningReason, msg)
	}
}

func setNodeHealthy(s *scope) {
	m := s.m
	if s.node == nil {
		m.Status.NodeRef = nil
		if s.infraStatus != nil && s.infraStatus.ProviderID != "" {
			setCondition(m, machinev1alpha1.NodeHealthyCondition, metav1.ConditionFalse, machinev1alpha1.NodeNotFoundReason,
				fmt.Sprintf("no Node has spec.providerID %s", s.infraStatus.ProviderID))
		}
		return
	}
	m.Status.NodeRef = &machinev1alpha1.NodeReference{Name: s.node.Name, UID: s.node.UID}
	for _, c := range s.node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			setCondition(m, machinev1alpha1.NodeHealthyCondition, metav1.ConditionTrue, machinev1alpha1.NodeReadyReason, "Node "+s.node.Name+" is Ready")
			return
		}
	}
	setCondition(m, machinev1alpha1.NodeHealthyCondition, metav1.ConditionFalse, machinev1alpha1.NodeNotReadyReason, "Node "+s.node.Name+" is not Ready")
}

func setReady(s *scope) {
	m, st := s.m, s.infraStatus
	want := m.EffectivePowerState()
	switch {
	case s.blockedReason != "":
		setCondition(m, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, s.blockedReason, s.blockedMessage)
	case s.duplicateMAC != "":
		setCondition(m, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.DuplicateMACAddressReason, s.duplicateMAC)
	case st == nil || !st.Provisioned:
		setCondition(m, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.ProvisioningReason, "the provider has not provisioned the machine yet")
	case st.Stale || machinev1alpha1.PowerState(st.PowerState) != want:
		msg := fmt.Sprintf("powering %s (observed %s)", want, orUnknown(st.PowerState))
		if st.Ready != nil && st.Ready.Status == metav1.ConditionFalse && st.Ready.Message != "" {
			msg += ": " + st.Ready.Reason + ": " + st.Ready.Message
		}
		setCondition(m, machinev1alpha1.ReadyCondition, metav1.ConditionFalse, machinev1alpha1.PowerTransitionReason, msg)
	case want == machinev1alpha1.PowerOff:
		setCondition(m, machinev1alpha1.ReadyCondition, metav1.ConditionTrue, machinev1alpha1.PoweredOffReason, "powered off as asked")
	default:
		setCondition(m, machinev1alpha1.ReadyCondition, metav1.ConditionTrue, machinev1alpha1.RunningReason, "provisioned and powered on")
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "nothing yet"
	}
	return s
}

func phase(s *scope) machinev1alpha1.MachinePhase {
	m, st := s.m, s.infraStatus
	switch {
	case !m.DeletionTimestamp.IsZero():
		return machinev1alpha1.PhaseDeleting
	case s.failed || s.duplicateMAC != "":
		return machinev1alpha1.PhaseFailed
	case st == nil:
		if m.Status.Phase != "" && s.blockedReason == machinev1alpha1.PausedReason {
			return m.Status.Phase
		}
		return machinev1alpha1.PhasePending
	case !st.Provisioned:
		return machinev1alpha1.PhaseProvisioning
	case st.PowerState == string(machinev1alpha1.PowerOff):
		return machinev1alpha1.PhasePoweredOff
	case st.PowerState == string(machinev1alpha1.PowerOn):
		return machinev1alpha1.PhaseRunning
	}
	return machinev1alpha1.PhaseProvisioning
}
