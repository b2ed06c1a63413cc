package upgradekit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageIsDocumented holds the documentation rule for every
// package of the module outside internal/ and hack/: a doc.go with the
// package comment, a runnable Example (one with an Output comment) in its
// tests for library packages, and a doc comment on every exported
// identifier (functions, methods of exported types, types, and constants
// and variables, by themselves or by their group).
func TestEveryPackageIsDocumented(t *testing.T) {
	dirs := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "internal", "hack", "staging":
				return filepath.SkipDir
			}
			if path != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module checks its own
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	for dir := range dirs {
		fset := token.NewFileSet()
		pkgs := map[string]map[string]*ast.File{} // package name -> file name -> file
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if pkgs[f.Name.Name] == nil {
				pkgs[f.Name.Name] = map[string]*ast.File{}
			}
			pkgs[f.Name.Name][name] = f
		}
		for name, files := range pkgs {
			if strings.HasSuffix(name, "_test") {
				continue
			}
			isMain := name == "main"
			if _, err := os.Stat(filepath.Join(dir, "doc.go")); err != nil && !isMain && dir != "." {
				problems = append(problems, dir+": no doc.go")
			}
			code := 0 // files besides doc.go: a package of tests only (a doc.go) has nothing to show
			for file := range files {
				if filepath.Base(file) != "doc.go" && !strings.HasSuffix(file, "_test.go") {
					code++
				}
			}
			if !isMain && dir != "." && code > 0 && !hasRunnableExample(t, dir) {
				problems = append(problems, dir+": no runnable Example (with an Output comment)")
			}
			if isMain {
				continue
			}
			for file, f := range files {
				if strings.HasSuffix(file, "_test.go") {
					continue
				}
				for _, decl := range f.Decls {
					problems = append(problems, undocumented(fset, decl)...)
				}
			}
		}
	}
	if len(problems) > 0 {
		t.Fatalf("%d documentation gaps:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

func hasRunnableExample(t *testing.T, dir string) bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if strings.Contains(s, "\nfunc Example") && strings.Contains(s, "// Output:") {
			return true
		}
	}
	return false
}

func undocumented(fset *token.FileSet, decl ast.Decl) []string {
	at := func(n ast.Node, what string) string {
		return fset.Position(n.Pos()).String() + ": " + what + " has no doc comment"
	}
	var out []string
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || d.Doc != nil {
			return nil
		}
		if d.Recv != nil {
			typ := d.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if id, ok := typ.(*ast.Ident); ok && !id.IsExported() {
				return nil
			}
			if ix, ok := typ.(*ast.IndexExpr); ok {
				if id, ok := ix.X.(*ast.Ident); ok && !id.IsExported() {
					return nil
				}
			}
		}
		out = append(out, at(d, d.Name.Name))
	case *ast.GenDecl:
		if d.Tok == token.IMPORT {
			return nil
		}
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() && d.Doc == nil && s.Doc == nil {
					out = append(out, at(s, s.Name.Name))
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
						out = append(out, at(n, n.Name))
					}
				}
			}
		}
	}
	return out
}
