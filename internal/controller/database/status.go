package database

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// scope holds what one reconcile observed and did.
type scope struct {
	d   *sqlv1alpha1.Database
	now time.Time
	// wasProvisioned: an earlier run saw the database exist, so a missing
	// database or role now is drift, not first provisioning.
	wasProvisioned bool

	dbName, owner, engine string

	available  bool
	atProvider *sqlv1alpha1.AtProvider
	// corrections made in this run.
	corrections []sqlv1alpha1.DriftCorrection

	reason, message string
	stalled         bool

	deleting                        bool
	deletingReason, deletingMessage string
}

func newScope(d *sqlv1alpha1.Database, now time.Time) *scope {
	// observedTime is only ever set by a successful observation, so it stays
	// as proof of an earlier provisioning even if a later write cleared
	// exists.
	return &scope{d: d, now: now, wasProvisioned: d.Status.AtProvider.Exists || d.Status.AtProvider.ObservedTime != nil}
}

func (s *scope) provisioned() bool { return s.wasProvisioned }

func (s *scope) fail(reason, message string, stalled bool) {
	s.available, s.reason, s.message, s.stalled = false, reason, message, stalled
}

func (s *scope) unavailable(err error) (ctrl.Result, error) {
	if sqlengine.IsPermissionDenied(err) {
		// The server answered: it is the admin's rights, not the instance,
		// that need a person.
		return s.provisionFailed(fmt.Errorf("the instance's admin user lacks a privilege: %w", err))
	}
	s.fail(sqlv1alpha1.InstanceUnavailableReason, err.Error(), false)
	return ctrl.Result{}, err
}

func (s *scope) provisionFailed(err error) (ctrl.Result, error) {
	s.fail(sqlv1alpha1.ProvisionFailedReason, err.Error(), false)
	return ctrl.Result{}, err
}

func (s *scope) corrected(kind, msg string) {
	s.corrections = append(s.corrections, sqlv1alpha1.DriftCorrection{Kind: kind, Message: reconcile.Truncate(msg, reconcile.MaxMessageBytes), Time: metav1.NewTime(s.now)})
	driftCorrections.WithLabelValues(kind).Inc()
}

// computeStatus turns the observations into status and conditions.
func computeStatus(s *scope) {
	st := &s.d.Status
	gen := s.d.Generation
	if s.dbName != "" {
		st.DatabaseName, st.Owner = s.dbName, s.owner
	}
	if s.engine != "" {
		st.Engine = s.engine
	}
	if s.atProvider != nil {
		st.AtProvider = *s.atProvider
	}
	if n := len(s.corrections); n > 0 {
		c := s.corrections[n-1]
		if n > 1 {
			var kinds []string
			for _, x := range s.corrections {
				kinds = append(kinds, x.Kind)
			}
			c.Message = reconcile.Truncate(fmt.Sprintf("%s (all corrections in this observation: %s)", c.Message, strings.Join(kinds, ", ")), reconcile.MaxMessageBytes)
		}
		st.LastDriftCorrected = &c
		st.DriftCorrections += int64(n)
	}
	if s.deleting {
		if s.deletingReason != "" {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sqlv1alpha1.DeletingCondition, Status: metav1.ConditionTrue,
				Reason: s.deletingReason, Message: reconcile.Truncate(s.deletingMessage, reconcile.MaxMessageBytes), ObservedGeneration: gen})
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sqlv1alpha1.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: nonEmpty(s.deletingReason, "Deleting"), Message: "the Database is being deleted", ObservedGeneration: gen})
		return
	}
	if s.available {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sqlv1alpha1.ReadyCondition, Status: metav1.ConditionTrue,
			Reason: sqlv1alpha1.AvailableReason, Message: fmt.Sprintf("Role %q logged in to database %q", s.owner, s.dbName), ObservedGeneration: gen})
		synced := metav1.Condition{Type: sqlv1alpha1.SyncedCondition, Status: metav1.ConditionTrue,
			Reason: sqlv1alpha1.UpToDateReason, Message: "The server matched the spec", ObservedGeneration: gen}
		if len(s.corrections) > 0 {
			synced.Reason, synced.Message = sqlv1alpha1.DriftCorrectedReason, st.LastDriftCorrected.Message
		}
		meta.SetStatusCondition(&st.Conditions, synced)
		meta.RemoveStatusCondition(&st.Conditions, sqlv1alpha1.StalledCondition)
		return
	}
	reason := nonEmpty(s.reason, sqlv1alpha1.ProvisioningReason)
	msg := reconcile.Truncate(nonEmpty(s.message, "Provisioning"), reconcile.MaxMessageBytes)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sqlv1alpha1.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: reason, Message: msg, ObservedGeneration: gen})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sqlv1alpha1.SyncedCondition, Status: metav1.ConditionFalse,
		Reason: reason, Message: msg, ObservedGeneration: gen})
	if s.stalled {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: sqlv1alpha1.StalledCondition, Status: metav1.ConditionTrue,
			Reason: reason, Message: msg, ObservedGeneration: gen})
	} else {
		meta.RemoveStatusCondition(&st.Conditions, sqlv1alpha1.StalledCondition)
	}
}

func nonEmpty(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
