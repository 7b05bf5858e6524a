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
// A mutant survives when the tests still pass: a line no test notices.
// Mutants whose build fails are not counted.
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
	if res, by := test(append([]string{*pkg}, splitList(*also)...), *run, *timeout); res != "survived" {
		fmt.Fprintf(os.Stderr, "mutate: the tests fail without any mutant (%s %s); fix them first\n", res, by)
		os.Exit(1)
	}
	var killed, survived, broken int
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
			case "killed":
				killed++
				if *verbose {
					fmt.Println("KILLED", where, "by", by)
				}
			case "survived":
				survived++
				fmt.Println("SURVIVED", where)
			default:
				broken++
			}
		}
	}
	total := killed + survived
	score := 0.0
	if total > 0 {
		score = 100 * float64(killed) / float64(total)
	}
	fmt.Printf("mutate %s: %d of %d mutants killed (%.0f%%), %d did not build\n", *pkg, killed, total, score, broken)
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

// test runs the packages' tests and classifies the mutant; for a killed
// one it also says which tests failed (or "timeout").
func test(pkgs []string, run string, timeout time.Duration) (string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout) //nolint:forbidigo // a command's root context: signals are handled by restore
	defer cancel()
	args := []string{"test", "-count=1", "-failfast"}
	if run != "" {
		args = append(args, "-run", run)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil:
		return "survived", ""
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return "broken", ""
	}
	var by []string
	for _, m := range failedTest.FindAllSubmatch(out, -1) {
		by = append(by, string(m[1]))
	}
	if ctx.Err() != nil {
		by = append(by, "timeout")
	}
	if len(by) == 0 {
		by = append(by, "a failing package (no test named)")
	}
	return "killed", strings.Join(by, ", ") // a failing test or a timeout

}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutate:", err)
	os.Exit(1)
}
