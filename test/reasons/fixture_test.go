package reasons

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckerTellsAssertionsFromMentions runs the check on
// testdata/fixture, a small module with one reason per way a test can refer
// to it: each rule of docs/testing.md must accept its reason, and a log
// line, a subtest name, a bare mention, a description argument, a fixture's
// input and a message in a failing branch must each fail the check, naming
// the reason and the line that only mentions it.
func TestCheckerTellsAssertionsFromMentions(t *testing.T) {
	all, err := analyze(filepath.Join("testdata", "fixture"), "example.com/fixture")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*reason{}
	for _, r := range all {
		byName[r.name] = r
	}
	asserted := []string{"ExpectedReason", "IfFatalReason", "HelperReason", "ClosureReason", "TableReason", "WantVarReason", "EventuallyReason", "LiteralReason"}
	mentioned := map[string]string{
		"LoggedReason":      "ctrl/ctrl_test.go:62 (in a call to t.Logf",
		"SubtestReason":     "ctrl/ctrl_test.go:66 (in a call to t.Run",
		"MentionedReason":   "ctrl/ctrl_test.go:74",
		"DescriptionReason": "ctrl/ctrl_test.go:80",
		"InputReason":       "ctrl/ctrl_test.go:84",
		"IfBodyReason":      "ctrl/ctrl_test.go:90 (in a call to t.Fatalf",
	}
	if len(all) != len(asserted)+len(mentioned) {
		t.Fatalf("fixture declares %d reasons, the test knows %d", len(all), len(asserted)+len(mentioned))
	}
	for _, n := range asserted {
		r := byName[n]
		if r == nil || len(r.asserted) == 0 {
			t.Errorf("%s is asserted in the fixture but the check does not see it: %+v", n, r)
		}
		if r != nil && len(r.set) == 0 {
			t.Errorf("%s is set in the fixture but the check does not see it", n)
		}
	}
	msgs := strings.Join(verdicts(all, nil), "\n")
	for n, where := range mentioned {
		r := byName[n]
		if r == nil {
			t.Fatalf("%s not found", n)
		}
		if len(r.asserted) != 0 {
			t.Errorf("%s is only mentioned in the fixture, yet the check counts it as asserted at %v", n, r.asserted)
		}
		if !strings.Contains(msgs, "v1."+n) || !strings.Contains(msgs, where) {
			t.Errorf("the failure for %s does not name it and where it is mentioned (%s); it says:\n%s", n, where, msgs)
		}
	}
	for _, n := range asserted {
		if strings.Contains(msgs, "v1."+n+" ") {
			t.Errorf("the check fails %s, which the fixture asserts:\n%s", n, msgs)
		}
	}
}
