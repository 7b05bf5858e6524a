package sqlinstance

import (
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// scope holds what one reconcile observed.
type scope struct {
	inst   sqlInstance
	engine sqlv1alpha1.Engine
	port   int

	ready   bool
	version string

	reason, message string
	stalled         bool
}

func (s *scope) fail(reason, message string, stalled bool) {
	s.ready, s.reason, s.message, s.stalled = false, reason, message, stalled
}

// computeStatus turns the observations into the contract fields and
// conditions. The contract fields are published only while Ready: a Database
// must never act on an instance that failed its last check.
func computeStatus(s *scope) {
	st := s.inst.InstanceStatus()
	spec := s.inst.InstanceSpec()
	gen := s.inst.GetGeneration()
	st.Engine = s.engine
	st.Ready = s.ready
	if s.ready {
		st.Endpoint = &sqlv1alpha1.Endpoint{Host: spec.Host, Port: int32(s.port)} //nolint:gosec // port is validated to 1..65535
		st.Version = s.version
		st.AdminSecretRef = &sqlv1alpha1.SecretReference{Name: spec.AdminSecretRef.Name}
		reconcile.MarkTrue(&st.Conditions, gen, sqlv1alpha1.ReadyCondition, sqlv1alpha1.ConnectedReason,
			reconcile.Truncate("Logged in and ran SELECT 1 on "+s.version, reconcile.MaxMessageBytes))
		reconcile.Remove(&st.Conditions, sqlv1alpha1.StalledCondition)
		return
	}
	st.Endpoint, st.AdminSecretRef = nil, nil
	msg := reconcile.Truncate(s.message, reconcile.MaxMessageBytes)
	reconcile.MarkFalse(&st.Conditions, gen, sqlv1alpha1.ReadyCondition, s.reason, msg)
	if s.stalled {
		reconcile.MarkTrue(&st.Conditions, gen, sqlv1alpha1.StalledCondition, s.reason, msg)
	} else {
		reconcile.Remove(&st.Conditions, sqlv1alpha1.StalledCondition)
	}
}
