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

// StalledCondition is the condition kstatus (sigs.k8s.io/cli-utils/pkg/kstatus:
// what a waiting Sync, Flux and kpt read) reads as Failed.
const StalledCondition = "Stalled"

// MirrorStalled is for a kind whose terminal failure has a condition of its
// own (a backup's Failed, a request's Denied): it sets Stalled=True with the
// reason and message of the first type in failed that is True, and removes
// Stalled when none is, so that kstatus reads the object Failed exactly
// while it has failed for good. (kstatus reads the rest from Ready and
// status.observedGeneration: Ready=False is InProgress, Ready=True
// Current.) With no failed types it changes nothing: a kind that sets
// Stalled itself keeps it. It reports whether anything changed.
func MirrorStalled(conds *[]metav1.Condition, generation int64, failed ...string) bool {
	if len(failed) == 0 {
		return false
	}
	for _, typ := range failed {
		if c := meta.FindStatusCondition(*conds, typ); c != nil && c.Status == metav1.ConditionTrue {
			return MarkTrue(conds, generation, StalledCondition, c.Reason, c.Message)
		}
	}
	return Remove(conds, StalledCondition)
}
