package sqlengine_test

import (
	"testing"

	"github.com/converge-dev/converge/internal/sqlengine"
)

// TestClaimSameObjectName: two claims name the same object when namespace
// and name both match, whatever their UIDs (another incarnation).
func TestClaimSameObjectName(t *testing.T) {
	a := sqlengine.Claim{UID: "u1", Namespace: "ns", Name: "orders"}
	cases := []struct {
		b    sqlengine.Claim
		want bool
	}{
		{sqlengine.Claim{UID: "u1", Namespace: "ns", Name: "orders"}, true},
		{sqlengine.Claim{UID: "u2", Namespace: "ns", Name: "orders"}, true},
		{sqlengine.Claim{UID: "u1", Namespace: "ns", Name: "billing"}, false},
		{sqlengine.Claim{UID: "u1", Namespace: "other", Name: "orders"}, false},
		{sqlengine.Claim{UID: "u1", Namespace: "other", Name: "billing"}, false},
	}
	for _, tc := range cases {
		if got := a.SameObjectName(tc.b); got != tc.want {
			t.Errorf("%v.SameObjectName(%v) = %v, want %v", a, tc.b, got, tc.want)
		}
		if got := tc.b.SameObjectName(a); got != tc.want {
			t.Errorf("%v.SameObjectName(%v) = %v, want %v", tc.b, a, got, tc.want)
		}
	}
}

// TestEffectiveClaim: an object's own marker wins; without one, a
// PostgreSQL database is judged by its owner role's.
func TestEffectiveClaim(t *testing.T) {
	own := sqlengine.Claim{UID: "u1", Namespace: "ns", Name: "a"}
	role := sqlengine.Claim{UID: "u2", Namespace: "ns", Name: "b"}
	for _, tc := range []struct {
		o    sqlengine.Ownership
		want sqlengine.Claim
	}{
		{sqlengine.Ownership{Exists: true, Claim: own, OwnerRoleClaim: role}, own},
		{sqlengine.Ownership{Exists: true, OwnerRoleClaim: role}, role},
		{sqlengine.Ownership{Exists: true, Claim: own}, own},
		{sqlengine.Ownership{Exists: true}, sqlengine.Claim{}},
	} {
		if got := tc.o.EffectiveClaim(); got != tc.want {
			t.Errorf("%+v.EffectiveClaim() = %v, want %v", tc.o, got, tc.want)
		}
	}
	if !(sqlengine.Claim{Namespace: "ns", Name: "a"}).IsZero() || own.IsZero() {
		t.Error("IsZero is about the UID")
	}
}
