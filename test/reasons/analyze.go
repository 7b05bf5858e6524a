package reasons

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// gomegaRoots start an assertion chain: Expect(x) … .To(m).
var gomegaRoots = map[string]bool{
	"Expect": true, "ExpectWithOffset": true, "Ω": true,
	"Eventually": true, "EventuallyWithOffset": true,
	"Consistently": true, "ConsistentlyWithOffset": true,
}

// gomegaEnds end an assertion chain; their first argument is the matcher.
var gomegaEnds = map[string]bool{
	"To": true, "ToNot": true, "NotTo": true, "Should": true, "ShouldNot": true,
}

// failCalls are the calls that make an if an assertion when its body (or
// else branch) makes one.
var failCalls = map[string]bool{
	"Fatal": true, "Fatalf": true, "Error": true, "Errorf": true,
	"Fail": true, "FailNow": true,
}

// assertHelpers are helpers outside the module (or not analysable) whose
// arguments are asserted. Helpers declared in the module are not listed:
// a parameter of a function declared anywhere in the module counts as
// asserted when the function's body asserts that parameter (by the rules
// here), so testenv.HasCondition and a test file's own expectReason are
// found from their bodies. Keep this list empty unless such a helper lives
// outside the module.
var assertHelpers = map[string]bool{}

// reason is one declared constant.
type reason struct {
	pkg       string // import path of the api package
	name      string // constant name
	value     string
	decl      string   // file:line of the declaration
	set       []string // references from non-test code
	asserted  []string // references from tests inside an assertion
	mentioned []string // references from tests that assert nothing
}

func (r *reason) key() string { return shortPkg(r.pkg) + "." + r.name }

func shortPkg(p string) string {
	i := strings.Index(p, "/api/")
	if i < 0 {
		return p
	}
	return p[i+1:]
}

type file struct {
	path    string
	dir     string
	pkg     string
	ast     *ast.File
	isTest  bool
	imports map[string]string // local name -> import path
}

// analysis holds what the rules derive, iterated to a fixed point.
type analysis struct {
	fset  *token.FileSet
	files []*file
	// vars: function (its position) -> local name asserted in it.
	vars map[token.Pos]map[string]bool
	// fields: package path -> field name asserted as x.field in it.
	fields map[string]map[string]bool
	// params: package path -> function or method name -> asserted params.
	params map[string]map[string][]bool
	funcs  map[string]map[string]*ast.FuncType
	// testTypes: package path -> type declared in its _test.go files.
	testTypes map[string]map[string]bool
}

// analyze parses the module at root (skipping testdata, vendor, bin and
// dot directories) and returns every reason with where it is set, asserted
// and only mentioned.
func analyze(root, module string) ([]*reason, error) {
	fset := token.NewFileSet()
	a := &analysis{fset: fset, vars: map[token.Pos]map[string]bool{}, fields: map[string]map[string]bool{}, params: map[string]map[string][]bool{}, funcs: map[string]map[string]*ast.FuncType{}, testTypes: map[string]map[string]bool{}}
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
		dir := filepath.Dir(path)
		relDir, _ := filepath.Rel(root, dir)
		pkg := module
		if relDir != "." {
			pkg += "/" + filepath.ToSlash(relDir)
		}
		a.files = append(a.files, &file{path: path, dir: dir, pkg: pkg, ast: f, isTest: strings.HasSuffix(path, "_test.go"), imports: imports})
		return nil
	})
	if err != nil {
		return nil, err
	}
	rel := func(pos token.Pos) string {
		p := fset.Position(pos)
		r, _ := filepath.Rel(root, p.Filename)
		return filepath.ToSlash(r) + ":" + strconv.Itoa(p.Line)
	}

	// Declarations.
	reasons := map[string]map[string]*reason{} // pkg -> name -> reason
	byValue := map[string]map[string][]*reason{}
	declPos := map[token.Pos]bool{}
	var all []*reason
	for _, f := range a.files {
		r, _ := filepath.Rel(root, f.path)
		if f.isTest || !strings.HasPrefix(filepath.ToSlash(r), "api/") {
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
					if reasons[f.pkg] == nil {
						reasons[f.pkg] = map[string]*reason{}
						byValue[f.pkg] = map[string][]*reason{}
					}
					r := &reason{pkg: f.pkg, name: n.Name, value: v, decl: rel(n.Pos())}
					reasons[f.pkg][n.Name] = r
					byValue[f.pkg][v] = append(byValue[f.pkg][v], r)
					declPos[n.Pos()] = true
					all = append(all, r)
				}
			}
		}
	}

	// Functions, for helper parameters; types of the tests, for tables.
	for _, f := range a.files {
		if f.isTest {
			ast.Inspect(f.ast, func(n ast.Node) bool {
				if ts, ok := n.(*ast.TypeSpec); ok {
					add(a.testTypes, f.pkg, ts.Name.Name)
				}
				return true
			})
		}
		for _, d := range f.ast.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				if a.funcs[f.pkg] == nil {
					a.funcs[f.pkg] = map[string]*ast.FuncType{}
				}
				a.funcs[f.pkg][fd.Name.Name] = fd.Type
			}
		}
	}

	// Fixed point: names, fields and parameters used inside assertions.
	for changed := true; changed; {
		changed = false
		for _, f := range a.files {
			walk(f.ast, func(stack []ast.Node, fn *ast.FuncDecl) {
				var name string
				var isField bool
				switch n := stack[len(stack)-1].(type) {
				case *ast.Ident:
					if len(stack) > 1 {
						if sel, ok := stack[len(stack)-2].(*ast.SelectorExpr); ok && sel.Sel == n {
							name, isField = n.Name, true
							stack = stack[:len(stack)-1]
							break
						}
					}
					name = n.Name
				default:
					return
				}
				if fn == nil || !a.assertedAtAs(f, fn, stack, true) {
					return
				}
				if isField {
					changed = add(a.fields, f.pkg, name) || changed
					return
				}
				changed = addPos(a.vars, fn.Pos(), name) || changed
			})
		}
		// Parameters asserted in their function's body.
		for _, f := range a.files {
			for _, d := range f.ast.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				var ps []bool
				for _, field := range fd.Type.Params.List {
					names := field.Names
					if len(names) == 0 {
						ps = append(ps, false)
					}
					for _, n := range names {
						ps = append(ps, a.vars[fd.Pos()][n.Name])
					}
				}
				if a.params[f.pkg] == nil {
					a.params[f.pkg] = map[string][]bool{}
				}
				old := a.params[f.pkg][fd.Name.Name]
				if !equal(old, ps) && anyTrue(ps) {
					a.params[f.pkg][fd.Name.Name] = orAll(old, ps)
					changed = changed || !equal(old, a.params[f.pkg][fd.Name.Name])
				}
			}
		}
	}

	// References.
	for _, f := range a.files {
		walk(f.ast, func(stack []ast.Node, fn *ast.FuncDecl) {
			var hits []*reason
			var as string
			switch n := stack[len(stack)-1].(type) {
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok {
					return
				}
				if p, ok := f.imports[x.Name]; ok {
					if r := reasons[p][n.Sel.Name]; r != nil {
						hits = append(hits, r)
					}
				}
			case *ast.Ident:
				if len(stack) > 1 {
					if sel, ok := stack[len(stack)-2].(*ast.SelectorExpr); ok && sel.Sel == n {
						return // counted as the selector
					}
				}
				if r := reasons[f.pkg][n.Name]; r != nil && !declPos[n.Pos()] {
					hits = append(hits, r)
				}
			case *ast.BasicLit:
				if !f.isTest || n.Kind != token.STRING {
					return
				}
				v, err := strconv.Unquote(n.Value)
				if err != nil {
					return
				}
				for _, p := range f.imports {
					hits = append(hits, byValue[p][v]...)
				}
				as = " (as \"" + v + "\")"
			}
			if len(hits) == 0 {
				return
			}
			where := rel(stack[len(stack)-1].Pos()) + as
			for _, r := range hits {
				switch {
				case !f.isTest:
					r.set = append(r.set, where)
				case fn != nil && a.assertedAt(f, fn, stack):
					r.asserted = append(r.asserted, where)
				default:
					r.mentioned = append(r.mentioned, where+" "+a.context(stack))
				}
			}
		})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key() < all[j].key() })
	return all, nil
}

// assertedAt reports whether the node at the top of stack (a reference)
// sits inside an assertion, by the rules in docs/testing.md:
//
//  1. inside a gomega chain Expect/Eventually/Consistently(x)….To/Should…(m):
//     in x or in the matcher m (not in the description arguments);
//  2. inside the condition of an if whose body or else branch calls
//     Fatal, Fatalf, Error, Errorf, Fail or FailNow;
//  3. compared (== or !=) in the result of a function literal passed to
//     Eventually/Consistently/Expect, that is itself a rule-1 assertion;
//  4. an argument of a call to a function of the module whose body asserts
//     that parameter (testenv.HasCondition, a test's own expectReason),
//     or of a listed helper;
//  5. assigned to a variable, or set as a struct field, or ranged over
//     into a variable, that is itself used inside an assertion (one name
//     per function; fields per package: tc.want).
//
// Anything else — a log line, a t.Run name, a Skip, a message, a fixture's
// input — is a mention.
//
// For a name (a variable, a field x.f, a parameter) the test is stricter,
// because a name also carries a test's input: it must be in the matcher of
// a gomega chain (not its actual value), or compared itself (== or !=, or
// an argument of a DeepEqual, Diff, Equal, Contains…) in a failing if.
func (a *analysis) assertedAt(f *file, fn *ast.FuncDecl, stack []ast.Node) bool {
	return a.assertedAtAs(f, fn, stack, false)
}

var comparers = map[string]bool{"DeepEqual": true, "Diff": true, "Equal": true, "EqualValues": true, "Contains": true, "HasPrefix": true, "HasSuffix": true, "EqualFold": true}

func (a *analysis) assertedAtAs(f *file, fn *ast.FuncDecl, stack []ast.Node, name bool) bool {
	compared := false
	direct := true // only selectors, stars, parens and indexes so far
	for i := len(stack) - 2; i >= 0; i-- {
		child, n := stack[i+1], stack[i]
		switch n := n.(type) {
		case *ast.CallExpr:
			callee := calleeName(n.Fun)
			if direct && comparers[callee] && argIndex(n, child) >= 0 {
				compared = true
			}
			direct = false
			if gomegaEnds[callee] && isGomegaChain(n.Fun) {
				return (child == n.Fun && !name) || (len(n.Args) > 0 && child == n.Args[0])
			}
			if k := argIndex(n, child); k >= 0 {
				if assertHelpers[callee] || a.paramAsserted(f, n.Fun, k) || a.closureParamAsserted(fn, n.Fun, k) {
					return true
				}
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (direct || !name) {
				compared = true
			}
			direct = false
		case *ast.SelectorExpr, *ast.StarExpr, *ast.ParenExpr, *ast.IndexExpr:
		case *ast.IfStmt:
			if name && !compared {
				return false
			}
			return child == n.Cond && (fails(n.Body) || (n.Else != nil && fails(n.Else)))
		case *ast.ReturnStmt:
			// return a == b, in a func literal given to Eventually & co.
			if !compared || i < 3 {
				return false
			}
			lit, ok := stack[i-2].(*ast.FuncLit)
			call, ok2 := stack[i-3].(*ast.CallExpr)
			if !ok || !ok2 || !gomegaRoots[calleeName(call.Fun)] {
				return false
			}
			i -= 2 // continue from the func literal, an argument of the root
			_ = lit
		case *ast.KeyValueExpr:
			if child != n.Value {
				return false
			}
			if k, ok := n.Key.(*ast.Ident); ok && i > 0 {
				if _, ok := stack[i-1].(*ast.CompositeLit); !ok {
					return false
				}
				if pkg, ok := a.typePkg(f, stack[:i]); ok && a.fields[pkg][k.Name] {
					return true
				}
			}
		case *ast.AssignStmt:
			for j, rhs := range n.Rhs {
				if rhs != child {
					continue
				}
				lhs := n.Lhs
				if len(n.Lhs) == len(n.Rhs) {
					lhs = n.Lhs[j : j+1]
				}
				for _, l := range lhs {
					if id, ok := l.(*ast.Ident); ok && a.vars[fn.Pos()][id.Name] {
						return true
					}
				}
			}
			return false
		case *ast.ValueSpec:
			for j, v := range n.Values {
				if v == child && j < len(n.Names) && a.vars[fn.Pos()][n.Names[j].Name] {
					return true
				}
			}
			return false
		case *ast.RangeStmt:
			if child != n.X {
				return false
			}
			for _, v := range []ast.Expr{n.Key, n.Value} {
				if id, ok := v.(*ast.Ident); ok && a.vars[fn.Pos()][id.Name] {
					return true
				}
			}
			return false
		case *ast.FuncLit, ast.Stmt, ast.Decl:
			return false
		default:
			direct = false
		}
	}
	return false
}

// typePkg is the package whose field names the keys of the composite
// literal at the top of stack are: an imported package's for pkg.T{…} (or
// an element of []pkg.T{…}, map[K]pkg.T{…}), else the file's own. It is
// false for a type of the file's own package declared outside its tests:
// such a literal builds the product's own values (an input), while a test
// table is an anonymous struct or a type its tests declare, and an imported
// type is a harness whose code asserts its fields.
func (a *analysis) typePkg(f *file, stack []ast.Node) (string, bool) {
	var t ast.Expr
	elided := 0
	for i := len(stack) - 1; i >= 0 && t == nil; i-- {
		cl, ok := stack[i].(*ast.CompositeLit)
		if !ok {
			continue
		}
		if cl.Type == nil {
			elided++
			continue
		}
		t = cl.Type
		for ; elided > 0; elided-- {
			switch tt := t.(type) {
			case *ast.ArrayType:
				t = tt.Elt
			case *ast.MapType:
				t = tt.Value
			case *ast.StarExpr:
				t = tt.X
				elided++
			default:
				return f.pkg, false
			}
		}
	}
	for {
		st, ok := t.(*ast.StarExpr)
		if !ok {
			break
		}
		t = st.X
	}
	switch t := t.(type) {
	case *ast.SelectorExpr:
		if x, ok := t.X.(*ast.Ident); ok {
			return f.imports[x.Name], true
		}
	case *ast.StructType:
		return f.pkg, true
	case *ast.Ident:
		return f.pkg, a.testTypes[f.pkg][t.Name]
	}
	return f.pkg, false
}

// closureParamAsserted reports whether fun names a function literal
// assigned to a local name in fn (check := func(…){…}) whose k-th
// parameter is asserted in fn.
func (a *analysis) closureParamAsserted(fn *ast.FuncDecl, fun ast.Expr, k int) bool {
	id, ok := fun.(*ast.Ident)
	if !ok || fn == nil || fn.Body == nil {
		return false
	}
	var ft *ast.FuncType
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != len(as.Rhs) {
			return ft == nil
		}
		for j, l := range as.Lhs {
			if lid, ok := l.(*ast.Ident); ok && lid.Name == id.Name {
				if lit, ok := as.Rhs[j].(*ast.FuncLit); ok {
					ft = lit.Type
				}
			}
		}
		return ft == nil
	})
	if ft == nil {
		return false
	}
	var names []string
	for _, field := range ft.Params.List {
		for _, n := range field.Names {
			names = append(names, n.Name)
		}
	}
	if k >= len(names) {
		return false
	}
	return a.vars[fn.Pos()][names[k]]
}

// paramAsserted reports whether the k-th argument of a call to fun lands
// in a parameter that the callee's body asserts.
func (a *analysis) paramAsserted(f *file, fun ast.Expr, k int) bool {
	pkg, name := f.pkg, ""
	switch fun := fun.(type) {
	case *ast.Ident:
		name = fun.Name
	case *ast.SelectorExpr:
		name = fun.Sel.Name
		if x, ok := fun.X.(*ast.Ident); ok {
			if p, ok := f.imports[x.Name]; ok {
				pkg = p
			}
		}
	default:
		return false
	}
	ps := a.params[pkg][name]
	if len(ps) == 0 {
		return false
	}
	if k >= len(ps) {
		ft := a.funcs[pkg][name]
		if ft == nil || len(ft.Params.List) == 0 {
			return false
		}
		if _, ok := ft.Params.List[len(ft.Params.List)-1].Type.(*ast.Ellipsis); !ok {
			return false
		}
		k = len(ps) - 1
	}
	return ps[k]
}

// context says, for a mention, what it sits in.
func (a *analysis) context(stack []ast.Node) string {
	for i := len(stack) - 2; i >= 0; i-- {
		switch n := stack[i].(type) {
		case *ast.CallExpr:
			return "(in a call to " + exprString(n.Fun) + ", not an assertion)"
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok {
				return "(a field " + k.Name + " no assertion reads)"
			}
		case *ast.AssignStmt, *ast.ValueSpec:
			return "(assigned to a name no assertion reads)"
		case *ast.IfStmt:
			return "(in an if that fails no test)"
		case ast.Stmt, ast.Decl, *ast.FuncLit:
			return "(not in an assertion)"
		}
	}
	return "(not in an assertion)"
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.CallExpr:
		return exprString(e.Fun) + "(…)"
	case *ast.IndexExpr:
		return exprString(e.X) + "[…]"
	}
	return "…"
}

func calleeName(fun ast.Expr) string {
	switch fun := fun.(type) {
	case *ast.Ident:
		return fun.Name
	case *ast.SelectorExpr:
		return fun.Sel.Name
	case *ast.IndexExpr:
		return calleeName(fun.X)
	}
	return ""
}

// isGomegaChain reports whether fun is x.To (or Should…) with x a chain
// of calls starting at Expect, Eventually or Consistently.
func isGomegaChain(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x := sel.X
	for {
		call, ok := x.(*ast.CallExpr)
		if !ok {
			return false
		}
		if gomegaRoots[calleeName(call.Fun)] {
			return true
		}
		s, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x = s.X
	}
}

func argIndex(call *ast.CallExpr, child ast.Node) int {
	for k, arg := range call.Args {
		if arg == child {
			return k
		}
	}
	return -1
}

// fails reports whether n calls x.Fatal, x.Errorf & co. directly (not in
// a function literal).
func fails(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if found {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && failCalls[sel.Sel.Name] {
				found = true
			}
		}
		return true
	})
	return found
}

// walk calls visit for every node of f with the path from the file down
// to it and the enclosing function declaration (nil at top level).
func walk(f *ast.File, visit func(stack []ast.Node, fn *ast.FuncDecl)) {
	var stack []ast.Node
	var fn *ast.FuncDecl
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			if d, ok := stack[len(stack)-1].(*ast.FuncDecl); ok && d == fn {
				fn = nil
			}
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		if d, ok := n.(*ast.FuncDecl); ok {
			fn = d
		}
		visit(stack, fn)
		return true
	})
}

func add(m map[string]map[string]bool, k, v string) bool {
	if m[k] == nil {
		m[k] = map[string]bool{}
	}
	if m[k][v] {
		return false
	}
	m[k][v] = true
	return true
}

func addPos(m map[token.Pos]map[string]bool, k token.Pos, v string) bool {
	if m[k] == nil {
		m[k] = map[string]bool{}
	}
	if m[k][v] {
		return false
	}
	m[k][v] = true
	return true
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func anyTrue(b []bool) bool {
	for _, v := range b {
		if v {
			return true
		}
	}
	return false
}

func orAll(a, b []bool) []bool {
	if a == nil {
		return b
	}
	if len(a) != len(b) {
		return a // two methods of one name: the first one found decides
	}
	out := make([]bool, len(a))
	for i := range a {
		out[i] = a[i] || b[i]
	}
	return out
}
