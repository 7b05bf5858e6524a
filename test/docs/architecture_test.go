package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// root is the repository root, seen from test/docs.
var root = filepath.Join("..", "..")

// TestArchitectureListsWhatTheCodeHas fails when docs/architecture.md leaves
// out a controller, a verb or an API group (or one of its kinds) that the
// code has. Each must have its own row in the page's table for it:
//
//   - section "Controllers": a row starting "| `NAME` |" for every name in
//     the controllers table of internal/setup (what --controllers accepts);
//   - section "Verbs": a row starting "| `converge VERB` |" for every
//     command added to the root command in cmd/converge;
//   - section "API groups": a row starting "| `GROUP` |" for every
//     api/<group>/v1alpha1, naming every kind its AddKnownTypes registers.
func TestArchitectureListsWhatTheCodeHas(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)

	controllers, err := wiredControllers(filepath.Join(root, "internal", "setup"))
	if err != nil {
		t.Fatalf("reading the controllers from internal/setup: %v", err)
	}
	rows := tableRows(t, doc, "Controllers")
	for _, name := range controllers {
		if _, ok := rows["`"+name+"`"]; !ok {
			t.Errorf("docs/architecture.md, section Controllers: no row for controller %q (wired in internal/setup)", name)
		}
	}

	verbs, err := rootVerbs(filepath.Join(root, "cmd", "converge"))
	if err != nil {
		t.Fatalf("reading the verbs from cmd/converge: %v", err)
	}
	rows = tableRows(t, doc, "Verbs")
	for _, verb := range verbs {
		if _, ok := rows["`converge "+verb+"`"]; !ok {
			t.Errorf("docs/architecture.md, section Verbs: no row for verb %q (added to the root command in cmd/converge)", "converge "+verb)
		}
	}

	groups, err := apiGroups(filepath.Join(root, "api"))
	if err != nil {
		t.Fatalf("reading the API groups from api/: %v", err)
	}
	rows = tableRows(t, doc, "API groups")
	for _, g := range groups {
		row, ok := rows["`"+g.name+"`"]
		if !ok {
			t.Errorf("docs/architecture.md, section API groups: no row for group %q (%s)", g.name, g.dir)
			continue
		}
		for _, kind := range g.kinds {
			if !containsWord(row, kind) {
				t.Errorf("docs/architecture.md, section API groups: the row of %q does not name kind %s (%s)", g.name, kind, g.dir)
			}
		}
	}
	t.Logf("checked %d controllers, %d verbs, %d API groups", len(controllers), len(verbs), len(groups))
}

// tableRows returns the table rows of the level-2 section titled heading,
// keyed by their first cell.
func tableRows(t *testing.T, doc, heading string) map[string]string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "## "+heading {
			start = i + 1
			break
		}
	}
	if start < 0 {
		t.Fatalf("docs/architecture.md has no section %q", "## "+heading)
	}
	rows := map[string]string{}
	for _, l := range lines[start:] {
		if strings.HasPrefix(l, "## ") {
			break
		}
		if !strings.HasPrefix(l, "|") {
			continue
		}
		cells := strings.Split(l, "|")
		if len(cells) > 2 {
			rows[strings.TrimSpace(cells[1])] = l
		}
	}
	return rows
}

// containsWord reports whether s has word with no letter or digit on
// either side (so that Machine is not found in MachineBMC).
func containsWord(s, word string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(word)
		if (j == 0 || !isWordByte(s[j-1])) && (end == len(s) || !isWordByte(s[end])) {
			return true
		}
		i = j + 1
	}
}

func isWordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// parseDir parses the non-test Go files of one directory.
func parseDir(fset *token.FileSet, dir string) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// wiredControllers reads the names of the controllers table (the package
// variable controllers, one composite literal per controller with a name
// field) of internal/setup. A name is a string literal or a constant of an
// imported package of this module.
func wiredControllers(dir string) ([]string, error) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, dir)
	if err != nil {
		return nil, err
	}
	module, err := modulePath()
	if err != nil {
		return nil, err
	}
	var names []string
	found := false
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if id.Name != "controllers" || i >= len(vs.Values) {
						continue
					}
					found = true
					list, ok := vs.Values[i].(*ast.CompositeLit)
					if !ok {
						return nil, fmt.Errorf("%s: controllers is not a composite literal", fset.Position(vs.Pos()))
					}
					for _, elt := range list.Elts {
						name, err := controllerName(fset, f, module, elt)
						if err != nil {
							return nil, err
						}
						names = append(names, name)
					}
				}
			}
		}
	}
	if !found || len(names) == 0 {
		return nil, fmt.Errorf("no controllers table (var controllers) with entries in %s; if the wiring moved, teach this test where", dir)
	}
	sort.Strings(names)
	return names, nil
}

// controllerName returns the value of the name field of one entry.
func controllerName(fset *token.FileSet, f *ast.File, module string, elt ast.Expr) (string, error) {
	lit, ok := elt.(*ast.CompositeLit)
	if !ok {
		return "", fmt.Errorf("%s: a controllers entry is not a composite literal", fset.Position(elt.Pos()))
	}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		if k, ok := kv.Key.(*ast.Ident); !ok || k.Name != "name" {
			continue
		}
		switch v := kv.Value.(type) {
		case *ast.BasicLit:
			return strconv.Unquote(v.Value)
		case *ast.SelectorExpr:
			pkg, ok := v.X.(*ast.Ident)
			if !ok {
				break
			}
			path, err := importPath(f, pkg.Name)
			if err != nil {
				return "", fmt.Errorf("%s: %w", fset.Position(v.Pos()), err)
			}
			if !strings.HasPrefix(path, module+"/") {
				return "", fmt.Errorf("%s: %s is outside the module", fset.Position(v.Pos()), path)
			}
			return stringConst(filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(path, module+"/"))), v.Sel.Name)
		}
		return "", fmt.Errorf("%s: a controller name this test cannot read (want a string literal or pkg.Const)", fset.Position(kv.Value.Pos()))
	}
	return "", fmt.Errorf("%s: a controllers entry without a name", fset.Position(elt.Pos()))
}

// importPath returns the path a file imports under the name pkg.
func importPath(f *ast.File, pkg string) (string, error) {
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return "", err
		}
		name := filepath.Base(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if name == pkg {
			return path, nil
		}
	}
	return "", fmt.Errorf("no import named %s", pkg)
}

// stringConst returns the value of the string constant name declared in the
// package in dir.
func stringConst(dir, name string) (string, error) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, dir)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if id.Name != name || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						return strconv.Unquote(lit.Value)
					}
					return "", fmt.Errorf("%s: %s is not a string literal", fset.Position(vs.Pos()), name)
				}
			}
		}
	}
	return "", fmt.Errorf("no constant %s in %s", name, dir)
}

// modulePath reads the module path from go.mod.
func modulePath() (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.TrimSpace(rest), nil
		}
	}
	return "", fmt.Errorf("go.mod has no module line")
}

// rootVerbs reads the verbs of the converge binary: every command passed to
// AddCommand in newRootCommand is a call of a constructor of this package,
// whose first cobra.Command literal is the verb; its Use starts with the
// verb's name. cobra's own help and completion are not listed.
func rootVerbs(dir string) ([]string, error) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, dir)
	if err != nil {
		return nil, err
	}
	funcs := map[string]*ast.FuncDecl{}
	for _, f := range files {
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil {
				funcs[fd.Name.Name] = fd
			}
		}
	}
	rootFn := funcs["newRootCommand"]
	if rootFn == nil {
		return nil, fmt.Errorf("no func newRootCommand in %s; if the command tree moved, teach this test where", dir)
	}
	var verbs []string
	var failure error
	ast.Inspect(rootFn.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || failure != nil {
			return failure == nil
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "AddCommand" {
			return true
		}
		for _, arg := range call.Args {
			var name string
			if c, ok := arg.(*ast.CallExpr); ok {
				if id, ok := c.Fun.(*ast.Ident); ok {
					name = id.Name
				}
			}
			if name == "" {
				failure = fmt.Errorf("%s: a command added to the root that is not a call of a constructor", fset.Position(arg.Pos()))
				return false
			}
			fd := funcs[name]
			if fd == nil {
				failure = fmt.Errorf("%s: no func %s in %s", fset.Position(arg.Pos()), name, dir)
				return false
			}
			use, err := firstUse(fset, fd)
			if err != nil {
				failure = err
				return false
			}
			verbs = append(verbs, strings.Fields(use)[0])
		}
		return false
	})
	if failure != nil {
		return nil, failure
	}
	if len(verbs) == 0 {
		return nil, fmt.Errorf("newRootCommand adds no commands")
	}
	sort.Strings(verbs)
	return verbs, nil
}

// firstUse returns the Use of the first cobra.Command literal in fd.
func firstUse(fset *token.FileSet, fd *ast.FuncDecl) (string, error) {
	var use string
	var err error
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if use != "" || err != nil {
			return false
		}
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		typ, ok := lit.Type.(*ast.SelectorExpr)
		if !ok || typ.Sel.Name != "Command" {
			return true
		}
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			if k, ok := kv.Key.(*ast.Ident); !ok || k.Name != "Use" {
				continue
			}
			v, ok := kv.Value.(*ast.BasicLit)
			if !ok || v.Kind != token.STRING {
				err = fmt.Errorf("%s: the Use of %s is not a string literal", fset.Position(kv.Pos()), fd.Name.Name)
				return false
			}
			use, err = strconv.Unquote(v.Value)
			if err == nil && strings.TrimSpace(use) == "" {
				err = fmt.Errorf("%s: the Use of %s is empty", fset.Position(kv.Pos()), fd.Name.Name)
			}
			return false
		}
		return true
	})
	if err == nil && use == "" {
		err = fmt.Errorf("%s: %s builds no cobra.Command with a Use", fset.Position(fd.Pos()), fd.Name.Name)
	}
	return use, err
}

// group is one API group: its name and the kinds it registers.
type group struct {
	name  string
	dir   string
	kinds []string
}

// apiGroups reads every api/<group>/v1alpha1: the group from the
// GroupVersion's Group field and the kinds from AddKnownTypes (List types
// left out).
func apiGroups(apiDir string) ([]group, error) {
	dirs, err := filepath.Glob(filepath.Join(apiDir, "*", "v1alpha1"))
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no api/<group>/v1alpha1 under %s", apiDir)
	}
	var out []group
	for _, dir := range dirs {
		g, err := apiGroup(dir)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

func apiGroup(dir string) (group, error) {
	rel, _ := filepath.Rel(root, dir)
	g := group{dir: filepath.ToSlash(rel)}
	fset := token.NewFileSet()
	files, err := parseDir(fset, dir)
	if err != nil {
		return g, err
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Group" {
					if v, ok := n.Value.(*ast.BasicLit); ok && v.Kind == token.STRING {
						g.name, _ = strconv.Unquote(v.Value)
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "AddKnownTypes" {
					for _, arg := range n.Args[1:] {
						u, ok := arg.(*ast.UnaryExpr)
						if !ok {
							continue
						}
						if lit, ok := u.X.(*ast.CompositeLit); ok {
							if id, ok := lit.Type.(*ast.Ident); ok && !strings.HasSuffix(id.Name, "List") {
								g.kinds = append(g.kinds, id.Name)
							}
						}
					}
				}
			}
			return true
		})
	}
	if g.name == "" || len(g.kinds) == 0 {
		return g, fmt.Errorf("%s: found group %q and kinds %v; want a GroupVersion with a Group literal and AddKnownTypes", g.dir, g.name, g.kinds)
	}
	sort.Strings(g.kinds)
	return g, nil
}
