package database

import (
	"fmt"
	"strings"
	"time"

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
	// A requested reconcile is marked as handled (as Flux's
	// status.lastHandledReconcileAt): it is the one status change an
	// observation that found nothing new still writes, so whoever asked
	// (converge reconcile, a script) can tell it ran.
	if v, ok := reconcile.RequestedAt(s.d); ok {
		st.LastHandledReconcileAt = v
	}
	if s.atProvider != nil {
		// An observation that found what the last one did keeps its
		// observedTime: a Database at rest is not written at all.
		if sameObservation(st.AtProvider, *s.atProvider) {
			s.atProvider.ObservedTime = st.AtProvider.ObservedTime
		}
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
			reconcile.MarkTrue(&st.Conditions, gen, sqlv1alpha1.DeletingCondition, s.deletingReason, reconcile.Truncate(s.deletingMessage, reconcile.MaxMessageBytes))
		}
		reconcile.MarkFalse(&st.Conditions, gen, sqlv1alpha1.ReadyCondition, nonEmpty(s.deletingReason, "Deleting"), "the Database is being deleted")
		return
	}
	if s.available {
		reconcile.MarkTrue(&st.Conditions, gen, sqlv1alpha1.ReadyCondition, sqlv1alpha1.AvailableReason,
			reconcile.Truncate(fmt.Sprintf("Role %q logged in to database %q", s.owner, s.dbName), reconcile.MaxMessageBytes))
		reason, msg := sqlv1alpha1.UpToDateReason, "The server matched the spec"
		if len(s.corrections) > 0 {
			reason, msg = sqlv1alpha1.DriftCorrectedReason, st.LastDriftCorrected.Message
		}
		reconcile.MarkTrue(&st.Conditions, gen, sqlv1alpha1.SyncedCondition, reason, msg)
		reconcile.Remove(&st.Conditions, sqlv1alpha1.StalledCondition)
		return
	}
	reason := nonEmpty(s.reason, sqlv1alpha1.ProvisioningReason)
	msg := reconcile.Truncate(nonEmpty(s.message, "Provisioning"), reconcile.MaxMessageBytes)
	reconcile.MarkFalse(&st.Conditions, gen, sqlv1alpha1.ReadyCondition, reason, msg)
	reconcile.MarkFalse(&st.Conditions, gen, sqlv1alpha1.SyncedCondition, reason, msg)
	if s.stalled {
		reconcile.MarkTrue(&st.Conditions, gen, sqlv1alpha1.StalledCondition, reason, msg)
	} else {
		reconcile.Remove(&st.Conditions, sqlv1alpha1.StalledCondition)
	}
}

// sameObservation: b found on the server what a found (existence, owner and
// size), whenever each was observed.
func sameObservation(a, b sqlv1alpha1.AtProvider) bool {
	return a.ObservedTime != nil && a.Exists == b.Exists && a.Owner == b.Owner && a.SizeBytes == b.SizeBytes
}

func nonEmpty(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
