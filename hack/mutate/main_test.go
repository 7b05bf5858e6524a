package main

import (
	"errors"
	"strings"
	"testing"
)

// Output of go test as it ends in each case (abridged to the lines that
// decide).
const (
	outPass    = "ok  \texample.com/p\t0.01s\n"
	outFail    = "--- FAIL: TestA (0.00s)\n    a_test.go:9: got 1\n--- FAIL: TestB (0.00s)\nFAIL\nFAIL\texample.com/p\t0.01s\n"
	outBuild   = "# example.com/p\n./a.go:3:2: undefined: x\nFAIL\texample.com/p [build failed]\n"
	outSetup   = "# example.com/p\nsetup failed\nFAIL\texample.com/p [setup failed]\n"
	outOwnTime = "panic: test timed out after 2m0s\n\trunning tests:\n\t\tTestHang (2m0s)\n\ngoroutine 17 [running]:\nFAIL\texample.com/p\t120.01s\n"
	outNoTest  = "FAIL\texample.com/p\t0.01s\n"
)

func TestClassify(t *testing.T) {
	exit1 := errors.New("exit status 1")
	killedSignal := errors.New("signal: killed")
	for _, c := range []struct {
		name     string
		out      string
		err      error
		deadline bool
		want     outcome
		by       string
	}{
		{"tests pass", outPass, nil, false, survived, ""},
		{"a test fails", outFail, exit1, false, killed, "TestA, TestB"},
		{"build fails", outBuild, exit1, false, broken, ""},
		{"setup fails", outSetup, exit1, false, broken, ""},
		{"a package fails with no test named", outNoTest, exit1, false, killed, "a failing package (no test named)"},
		// The issue: a timeout is not a kill.
		{"the deadline passes", "", killedSignal, true, timedOut, "(the -timeout deadline)"},
		{"the deadline passes after partial output", outNoTest, killedSignal, true, timedOut, "(the -timeout deadline)"},
		{"go test's own timeout", outOwnTime, exit1, false, timedOut, "(go test's own timeout)"},
		// A test that failed before the deadline noticed the mutant.
		{"a test fails, then the deadline passes", outFail, killedSignal, true, killed, "TestA, TestB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, by := classify([]byte(c.out), c.err, c.deadline)
			if got != c.want || by != c.by {
				t.Errorf("classify = %q, %q; want %q, %q", got, by, c.want, c.by)
			}
		})
	}
}

func TestSummaryCountsATimeoutAsNotKilled(t *testing.T) {
	got := summary("./p", 2, 1, 1, 3)
	want := "mutate ./p: 2 of 4 mutants killed (50%), 1 survived, 1 timed out, 3 did not build"
	if got != want {
		t.Errorf("summary = %q\nwant      %q", got, want)
	}
	if got := summary("./p", 0, 0, 0, 0); !strings.Contains(got, "0 of 0 mutants killed (0%)") {
		t.Errorf("summary of nothing = %q", got)
	}
}
