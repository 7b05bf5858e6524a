package database

import (
	"testing"

	"github.com/converge-dev/converge/internal/sqlengine"
)

// TestJudge is the ownership decision as a table: what is refused, what is
// adopted (only when asked, never another Database's), what is ours.
func TestJudge(t *testing.T) {
	mine := sqlengine.Claim{UID: "u1", Namespace: "team", Name: "orders"}
	previous := sqlengine.Claim{UID: "u0", Namespace: "team", Name: "orders"} // a deleted Database of the same name that retained it
	other := sqlengine.Claim{UID: "u2", Namespace: "other", Name: "orders"}
	var none sqlengine.Claim
	for _, tc := range []struct {
		name   string
		exists bool
		found  sqlengine.Claim
		adopt  bool
		want   verdict
	}{
		{"missing: create", false, none, false, verdictMine},
		{"ours", true, mine, false, verdictMine},
		{"claimed by us, not yet created (MariaDB crash window)", false, mine, false, verdictMine},
		{"unmarked: refused", true, none, false, verdictForeign},
		{"unmarked, adoptExisting: adopted", true, none, true, verdictAdopt},
		{"another Database's: refused", true, other, false, verdictForeign},
		{"another Database's, adoptExisting: still refused", true, other, true, verdictForeign},
		{"claimed by another Database, not yet created: refused", false, other, true, verdictForeign},
		{"retained by a deleted Database of the same name: refused", true, previous, false, verdictForeign},
		{"retained by a deleted Database of the same name, adoptExisting: adopted", true, previous, true, verdictAdopt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judge(tc.exists, tc.found, mine, tc.adopt); got != tc.want {
				t.Fatalf("judge = %v, want %v", got, tc.want)
			}
		})
	}
}
