package machinebmc

import (
	"errors"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// computeStatus turns the observations on s into status and conditions.
func computeStatus(s *scope) {
	b := s.b
	g := b.Generation
	conds := &b.Status.Conditions
	if s.machineErr != nil {
		creconcile.MarkFalse(conds, g, bmcv1alpha1.MachineAvailableCondition, bmcv1alpha1.MachineNotFoundReason,
			"Machine "+b.Spec.MachineRef.Name+" not found in namespace "+b.Namespace)
	} else {
		creconcile.MarkTrue(conds, g, bmcv1alpha1.MachineAvailableCondition, bmcv1alpha1.MachineFoundReason, "Machine "+b.Spec.MachineRef.Name)
	}
	var invalid errSecretInvalid
	switch {
	case s.secretErr == nil:
		creconcile.MarkTrue(conds, g, bmcv1alpha1.SecretAvailableCondition, bmcv1alpha1.SecretFoundReason, "Secret "+b.Spec.AuthSecretRef.Name)
	case errors.As(s.secretErr, &invalid):
		creconcile.MarkFalse(conds, g, bmcv1alpha1.SecretAvailableCondition, bmcv1alpha1.SecretInvalidReason, invalid.why)
	default:
		creconcile.MarkFalse(conds, g, bmcv1alpha1.SecretAvailableCondition, bmcv1alpha1.SecretNotFoundReason,
			"Secret "+b.Spec.AuthSecretRef.Name+" not found in namespace "+b.Namespace)
	}
	b.Status.IPMIEndpoint, b.Status.RedfishEndpoint, b.Status.RedfishCABundle = s.ep.IPMI, s.ep.Redfish, s.caBundle
	switch {
	case s.machineErr != nil:
		creconcile.MarkFalse(conds, g, bmcv1alpha1.ReadyCondition, bmcv1alpha1.MachineNotFoundReason, "Machine "+b.Spec.MachineRef.Name+" not found")
	case s.secretErr != nil:
		creconcile.MarkFalse(conds, g, bmcv1alpha1.ReadyCondition, creconcile.Reason(*conds, bmcv1alpha1.SecretAvailableCondition), s.secretErr.Error())
	case s.publishErr != nil:
		reason := bmcv1alpha1.ServicePendingReason
		var conflict errServiceConflict
		if errors.As(s.publishErr, &conflict) {
			reason = bmcv1alpha1.ServiceConflictReason
		}
		creconcile.MarkFalse(conds, g, bmcv1alpha1.ReadyCondition, reason, s.publishErr.Error())
	case s.probeErr != nil:
		creconcile.MarkFalse(conds, g, bmcv1alpha1.ReadyCondition, bmcv1alpha1.ProbeFailedReason, s.probeErr.Error())
	case s.probed:
		msg := "answering"
		if s.ep.IPMI != "" {
			msg += " IPMI at " + s.ep.IPMI
		}
		if s.ep.Redfish != "" {
			if s.ep.IPMI != "" {
				msg += " and"
			}
			msg += " Redfish at " + s.ep.Redfish
		}
		creconcile.MarkTrue(conds, g, bmcv1alpha1.ReadyCondition, bmcv1alpha1.ServingReason, msg)
	}
}
