// Command mutate is a small mutation tester: it flips one comparison or
// boolean operator at a time in a package's non-test files, runs the
// package's tests, and reports which mutants the tests killed. It restores
// every file, also when interrupted (SIGINT, SIGTERM; not SIGKILL: then
// `git checkout` the package).
//
//	go run ./hack/mutate -pkg ./internal/expr [-run REGEXP] [-timeout 2m]
//	go run ./hack/mutate -pkg ./internal/controller/sync -lines prune.go:42,prune.go:57
//
// -lines limits the mutants to the operators on the named lines (a file's
// base name and a line): the guard lines of a controller whose whole
// package would take hours.
//
// A mutant is killed when a test fails; it survives when the tests still
// pass: a line no test notices. A mutant whose tests run past -timeout (or
// past go test's own timeout) is a timeout, reported as TIMEOUT and counted
// apart: it is not killed (no test failed; the mutant may only have made a
// loop endless or a wait longer) and it lowers the score, which is killed
// of killed + survived + timed out. Mutants whose build fails are not
// counted.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// restore puts back the file being mutated; it runs on exit and on a signal.
var (
	restoreMu sync.Mutex
	restoreFn func()
)

func setRestore(f func()) {
	restoreMu.Lock()
	defer restoreMu.Unlock()
	restoreFn = f
}

var flips = map[token.Token]token.Token{
	token.EQL: token.NEQ, token.NEQ: token.EQL,
	token.LSS: token.GEQ, token.GEQ: token.LSS,
	token.GTR: token.LEQ, token.LEQ: token.GTR,
	token.LAND: token.LOR, token.LOR: token.LAND,
}

func main() {
	pkg := flag.String("pkg", "", "package directory, e.g. ./internal/expr")
	run := flag.String("run", "", "go test -run regexp (default: every test)")
	timeout := flag.Duration("timeout", 2*time.Minute, "per-mutant test timeout")
	lines := flag.String("lines", "", "only these lines: comma-separated FILE:LINE (base name), e.g. phases.go:262")
	verbose := flag.Bool("v", false, "also print each killed mutant and the tests that failed")
	also := flag.String("also", "", "more packages whose tests run against each mutant: comma-separated, e.g. ./internal/controller/databasebackup")
	fileList := flag.String("files", "", "only these files: comma-separated base names, e.g. ident.go,dump.go")
	flag.Parse()
	onlyFiles := map[string]bool{}
	for _, f := range splitList(*fileList) {
		onlyFiles[f] = true
	}
	only := map[string]bool{}
	for _, l := range splitList(*lines) {
		only[l] = true
	}
	if *pkg == "" {
		fmt.Fprintln(os.Stderr, "mutate: -pkg is required")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(*pkg, "*.go"))
	if err != nil {
		fail(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		restoreMu.Lock()
		if restoreFn != nil {
			restoreFn()
		}
		os.Exit(1)
	}()
	// A test that fails without any mutant "kills" every mutant: run the
	// tests once on the unchanged package first.
	if res, by := test(append([]string{*pkg}, splitList(*also)...), *run, *timeout); res != survived {
		fmt.Fprintf(os.Stderr, "mutate: the tests fail without any mutant (%s %s); fix them first\n", res, by)
		os.Exit(1)
	}
	var nKilled, nSurvived, nTimedOut, nBroken int
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") || strings.HasPrefix(filepath.Base(path), "zz_generated") {
			continue
		}
		if len(onlyFiles) > 0 && !onlyFiles[filepath.Base(path)] {
			continue
		}
		orig, err := os.ReadFile(path)
		if err != nil {
			fail(err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, orig, parser.ParseComments)
		if err != nil {
			fail(err)
		}
		var sites []*ast.BinaryExpr
		ast.Inspect(f, func(n ast.Node) bool {
			if b, ok := n.(*ast.BinaryExpr); ok {
				if _, ok := flips[b.Op]; ok {
					sites = append(sites, b)
				}
			}
			return true
		})
		for _, b := range sites {
			if len(only) > 0 && !only[fmt.Sprintf("%s:%d", filepath.Base(path), fset.Position(b.OpPos).Line)] {
				continue
			}
			op := b.Op
			b.Op = flips[op]
			var buf bytes.Buffer
			if err := printer.Fprint(&buf, fset, f); err != nil {
				fail(err)
			}
			b.Op = op
			where := fmt.Sprintf("%s:%d %s→%s", path, fset.Position(b.OpPos).Line, op, flips[op])
			setRestore(func() { _ = os.WriteFile(path, orig, 0o644) }) //nolint:gosec // path is a file of the package the user named
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				fail(err)
			}
			res, by := test(append([]string{*pkg}, splitList(*also)...), *run, *timeout)
			if err := os.WriteFile(path, orig, 0o644); err != nil { //nolint:gosec // as above
				fail(err)
			}
			setRestore(nil)
			switch res {
			case killed:
				nKilled++
				if *verbose {
					fmt.Println("KILLED", where, "by", by)
				}
			case survived:
				nSurvived++
				fmt.Println("SURVIVED", where)
			case timedOut:
				nTimedOut++
				fmt.Println("TIMEOUT", where, by)
			default:
				nBroken++
			}
		}
	}
	fmt.Println(summary(*pkg, nKilled, nSurvived, nTimedOut, nBroken))
}

// summary is the last line: the score counts a timeout as not killed.
func summary(pkg string, nKilled, nSurvived, nTimedOut, nBroken int) string {
	total := nKilled + nSurvived + nTimedOut
	score := 0.0
	if total > 0 {
		score = 100 * float64(nKilled) / float64(total)
	}
	return fmt.Sprintf("mutate %s: %d of %d mutants killed (%.0f%%), %d survived, %d timed out, %d did not build",
		pkg, nKilled, total, score, nSurvived, nTimedOut, nBroken)
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// failedTest matches a failing top-level test in go test's output.
var failedTest = regexp.MustCompile(`(?m)^--- FAIL: (\S+)`)

// testTimedOut matches the panic of a test binary that ran past go test's
// -timeout.
var testTimedOut = regexp.MustCompile(`(?m)^panic: test timed out after`)

// A mutant's fate.
type outcome string

const (
	killed   outcome = "killed"   // a test failed
	survived outcome = "survived" // the tests passed
	timedOut outcome = "timeout"  // the tests ran past the deadline, none failed
	broken   outcome = "broken"   // the mutant did not build
)

// test runs the packages' tests against the mutant and classifies it.
func test(pkgs []string, run string, timeout time.Duration) (outcome, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout) //nolint:forbidigo // a command's root context: signals are handled by restore
	defer cancel()
	args := []string{"test", "-count=1", "-failfast"}
	if run != "" {
		args = append(args, "-run", run)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	// At the deadline, kill the test binaries too, not only the go command:
	// a hung one would hold the output pipe until go test's own timeout.
	killGroup(cmd)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return classify(out, err, ctx.Err() != nil)
}

// classify decides a mutant's fate from go test's output, its error, and
// whether the per-mutant deadline passed; for a killed mutant it also says
// which tests failed. A test that failed kills the mutant even if another
// package then ran into the deadline; without one, a deadline or go test's
// own timeout is a timeout, not a kill.
func classify(out []byte, err error, deadline bool) (outcome, string) {
	switch {
	case err == nil:
		return survived, ""
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return broken, ""
	}
	var by []string
	for _, m := range failedTest.FindAllSubmatch(out, -1) {
		by = append(by, string(m[1]))
	}
	if len(by) > 0 {
		return killed, strings.Join(by, ", ")
	}
	if deadline {
		return timedOut, "(the -timeout deadline)"
	}
	if testTimedOut.Match(out) {
		return timedOut, "(go test's own timeout)"
	}
	return killed, "a failing package (no test named)"
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutate:", err)
	os.Exit(1)
}
