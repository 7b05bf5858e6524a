package reconcile

import (
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetCondition sets the condition typ in conds, stamped with generation (the
// metadata.generation it describes). LastTransitionTime changes only when the
// status does. It reports whether anything changed.
func SetCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string) bool {
	return meta.SetStatusCondition(conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		ObservedGeneration: generation,
		Reason:             reason,
		Message:            message,
	})
}

// MarkTrue sets typ to True; see [SetCondition].
func MarkTrue(conds *[]metav1.Condition, generation int64, typ, reason, message string) bool {
	return SetCondition(conds, generation, typ, metav1.ConditionTrue, reason, message)
}

// MarkFalse sets typ to False; see [SetCondition].
func MarkFalse(conds *[]metav1.Condition, generation int64, typ, reason, message string) bool {
	return SetCondition(conds, generation, typ, metav1.ConditionFalse, reason, message)
}

// MarkUnknown sets typ to Unknown; see [SetCondition].
func MarkUnknown(conds *[]metav1.Condition, generation int64, typ, reason, message string) bool {
	return SetCondition(conds, generation, typ, metav1.ConditionUnknown, reason, message)
}

// Remove deletes the condition typ from conds and reports whether it was there.
func Remove(conds *[]metav1.Condition, typ string) bool {
	return meta.RemoveStatusCondition(conds, typ)
}

// IsTrue reports whether typ is True in conds.
func IsTrue(conds []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionTrue(conds, typ)
}

// Reason returns the reason of typ in conds, or "" when it is not set.
func Reason(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return c.Reason
	}
	return ""
}

// MaxMessageBytes is how long a condition message built from an error or
// from a remote system's text may grow before [Truncate] cuts it: long
// enough for an actionable message, short enough that a status stays small
// (the API allows 32 KiB per condition message).
const MaxMessageBytes = 1024

// Truncate returns s cut to at most maxBytes bytes, ending in "..." when it
// was cut. It cuts on a rune boundary, so the result stays valid UTF-8 when
// s is (the API server refuses a condition message that is not).
func Truncate(s string, maxBytes int) string {
	const ellipsis = "..."
	if len(s) <= maxBytes {
		return s
	}
	if maxBytes <= len(ellipsis) {
		return ellipsis[:max(maxBytes, 0)]
	}
	cut := maxBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// The condition types kstatus (sigs.k8s.io/cli-utils/pkg/kstatus: what a
// waiting Sync, Flux and kpt read) gives a meaning to, and Ready, which
// every Converge kind sets.
const (
	ReadyCondition       = "Ready"
	ReconcilingCondition = "Reconciling"
	StalledCondition     = "Stalled"
)

// SetKstatus keeps the conditions kstatus reads in step with Ready, so that
// kstatus reads the object as its controller means it:
//
//   - Ready=True is Current: no Reconciling;
//   - Stalled=True is Failed: no Reconciling (nothing changes until someone
//     acts);
//   - any other Ready (False or Unknown: the controller is still working
//     towards it) is InProgress: Reconciling=True with Ready's reason and
//     message;
//   - no Ready condition: no Reconciling.
//
// A kind whose terminal failure has a condition of its own (a backup's
// Failed, a request's Denied) names those types in failed: then this
// function owns Stalled too, True with the reason and message of the first
// failed type that is True, removed when none is. Call it after the
// reconcile set its conditions, before the status is written. It reports
// whether anything changed.
func SetKstatus(conds *[]metav1.Condition, generation int64, failed ...string) bool {
	changed := false
	if len(failed) > 0 {
		var cause *metav1.Condition
		for _, typ := range failed {
			if c := meta.FindStatusCondition(*conds, typ); c != nil && c.Status == metav1.ConditionTrue {
				cause = c
				break
			}
		}
		if cause != nil {
			changed = MarkTrue(conds, generation, StalledCondition, cause.Reason, cause.Message)
		} else {
			changed = Remove(conds, StalledCondition)
		}
	}
	ready := meta.FindStatusCondition(*conds, ReadyCondition)
	if ready == nil || ready.Status == metav1.ConditionTrue || meta.IsStatusConditionTrue(*conds, StalledCondition) {
		return Remove(conds, ReconcilingCondition) || changed
	}
	reason, message := ready.Reason, ready.Message
	return MarkTrue(conds, generation, ReconcilingCondition, reason, message) || changed
}
