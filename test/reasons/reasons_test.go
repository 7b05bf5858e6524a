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
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
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

// reason is one declared constant.
type reason struct {
	pkg   string // import path of the api package
	name  string // constant name
	value string
	decl  string // file:line of the declaration
	set   []string
	tests []string
}

func (r *reason) key() string { return shortPkg(r.pkg) + "." + r.name }

func shortPkg(p string) string {
	i := strings.Index(p, "/api/")
	if i < 0 {
		return p
	}
	return p[i+1:]
}

func TestEveryReasonIsSetAndAsserted(t *testing.T) {
	root, module := moduleRoot(t)
	fset := token.NewFileSet()

	type file struct {
		path    string
		dir     string
		ast     *ast.File
		isTest  bool
		imports map[string]string // local name -> import path
	}
	var files []file
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		imports := map[string]string{}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imports[name] = p
		}
		files = append(files, file{path: path, dir: filepath.Dir(path), ast: f, isTest: strings.HasSuffix(path, "_test.go"), imports: imports})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	pkgOf := func(dir string) string {
		rel, _ := filepath.Rel(root, dir)
		return module + "/" + filepath.ToSlash(rel)
	}
	rel := func(pos token.Pos) string {
		p := fset.Position(pos)
		r, _ := filepath.Rel(root, p.Filename)
		return r + ":" + strconv.Itoa(p.Line)
	}

	// Declarations.
	reasons := map[string]map[string]*reason{} // pkg -> name -> reason
	byValue := map[string]map[string][]*reason{}
	declPos := map[token.Pos]bool{}
	for _, f := range files {
		if f.isTest || !strings.HasPrefix(filepath.ToSlash(mustRel(root, f.path)), "api/") {
			continue
		}
		for _, d := range f.ast.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasSuffix(n.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					pkg := pkgOf(f.dir)
					if reasons[pkg] == nil {
						reasons[pkg] = map[string]*reason{}
						byValue[pkg] = map[string][]*reason{}
					}
					r := &reason{pkg: pkg, name: n.Name, value: v, decl: rel(n.Pos())}
					reasons[pkg][n.Name] = r
					byValue[pkg][v] = append(byValue[pkg][v], r)
					declPos[n.Pos()] = true
				}
			}
		}
	}
	if len(reasons) == 0 {
		t.Fatal("no *Reason constants found under api/: is the module root right?")
	}

	// References.
	for _, f := range files {
		pkg := pkgOf(f.dir)
		record := func(r *reason, pos token.Pos) {
			if f.isTest {
				r.tests = append(r.tests, rel(pos))
			} else {
				r.set = append(r.set, rel(pos))
			}
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok {
					return true
				}
				if p, ok := f.imports[x.Name]; ok {
					if r := reasons[p][n.Sel.Name]; r != nil {
						record(r, n.Pos())
					}
				}
				return false
			case *ast.Ident:
				// A bare name inside the declaring package.
				if r := reasons[pkg][n.Name]; r != nil && !declPos[n.Pos()] {
					record(r, n.Pos())
				}
			case *ast.BasicLit:
				if !f.isTest || n.Kind != token.STRING {
					return true
				}
				v, err := strconv.Unquote(n.Value)
				if err != nil {
					return true
				}
				for _, p := range f.imports {
					for _, r := range byValue[p][v] {
						r.tests = append(r.tests, rel(n.Pos())+" (as \""+v+"\")")
					}
				}
			}
			return true
		})
	}

	var all []*reason
	for _, m := range reasons {
		for _, r := range m {
			all = append(all, r)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key() < all[j].key() })

	seen := map[string]bool{}
	for _, r := range all {
		k := r.key()
		seen[k] = true
		t.Logf("%s = %q (%s)\n  set at:      %s\n  asserted at: %s", k, r.value, r.decl, list(r.set), list(r.tests))
		if len(r.set) == 0 {
			t.Errorf("%s (%q, %s) is declared but no code sets it: set it where that failure happens, or remove it", k, r.value, r.decl)
		}
		why, allowed := unasserted[k]
		switch {
		case len(r.tests) == 0 && !allowed:
			t.Errorf("%s (%q, %s) is asserted by no test: write a test that makes this happen and asserts the reason by name", k, r.value, r.decl)
		case len(r.tests) > 0 && allowed:
			t.Errorf("%s is now asserted (%s): remove it from the allow-list in test/reasons (was: %s)", k, r.tests[0], why)
		}
	}
	for k := range unasserted {
		if !seen[k] {
			t.Errorf("allow-list entry %s names no declared reason: remove it", k)
		}
	}
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

func mustRel(root, p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
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
