// Package reasons checks that every condition reason declared in api/ is
// set by the code and asserted by a test.
//
// A reason is a string constant whose name ends in "Reason" in any package
// under api/. For each one the check looks, in every Go file of the module:
//
//   - set: a reference to the constant from a non-test file (other than its
//     own declaration);
//   - asserted: a reference to the constant from a _test.go file, or its value
//     as a string literal in a _test.go file that imports the constant's
//     package (so "Available" in a workloads test does not count for sql).
//
// It fails naming each reason that nothing sets or no test asserts, and each
// allow-listed reason that has since become asserted (so the list only
// shrinks). Run it with -v to print, for every reason, where it is set and
// where it is asserted.
package reasons

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// unasserted lists reasons no test asserts yet, each with why. The check
// fails when one of them becomes asserted, so that the entry is removed.
// Keep it short: every entry is a failure a user can meet without a test
// proving it.
var unasserted = map[string]string{}

func TestEveryReasonIsSetAndAsserted(t *testing.T) {
	root, module := moduleRoot(t)
	all, err := analyze(root, module)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no *Reason constants found under api/: is the module root right?")
	}
	for _, msg := range verdicts(all, unasserted) {
		t.Error(msg)
	}
	for _, r := range all {
		t.Logf("%s = %q (%s)\n  set at:       %s\n  asserted at:  %s\n  mentioned at: %s", r.key(), r.value, r.decl, list(r.set), list(r.asserted), list(r.mentioned))
	}
}

// verdicts are the failures of the check: reasons nothing sets, reasons no
// test asserts (naming where tests only mention them), and allow-list
// entries that are stale.
func verdicts(all []*reason, allow map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range all {
		k := r.key()
		seen[k] = true
		if len(r.set) == 0 {
			out = append(out, fmt.Sprintf("%s (%q, %s) is declared but no code sets it: set it where that failure happens, or remove it", k, r.value, r.decl))
		}
		why, allowed := allow[k]
		switch {
		case len(r.asserted) == 0 && !allowed:
			msg := fmt.Sprintf("%s (%q, %s) is asserted by no test: write a test that makes this happen and asserts the reason inside an assertion (docs/testing.md, \"What counts as an assertion\")", k, r.value, r.decl)
			if len(r.mentioned) > 0 {
				msg += "; tests only mention it at:\n\t" + strings.Join(r.mentioned, "\n\t")
			}
			out = append(out, msg)
		case len(r.asserted) > 0 && allowed:
			out = append(out, fmt.Sprintf("%s is now asserted (%s): remove it from the allow-list in test/reasons (was: %s)", k, r.asserted[0], why))
		}
	}
	var stale []string
	for k := range allow {
		if !seen[k] {
			stale = append(stale, fmt.Sprintf("allow-list entry %s names no declared reason: remove it", k))
		}
	}
	sort.Strings(stale)
	return append(out, stale...)
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	const most = 6
	if len(s) > most {
		return strings.Join(s[:most], ", ") + ", … (" + strconv.Itoa(len(s)) + ")"
	}
	return strings.Join(s, ", ")
}

// moduleRoot finds go.mod above the working directory and returns its
// directory and module path.
func moduleRoot(t *testing.T) (string, string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return dir, strings.TrimSpace(m)
				}
			}
			t.Fatal("go.mod has no module line")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}
