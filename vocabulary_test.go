package upgradekit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConstantsCarryTheirTypeName: an exported constant of a named type is
// spelled with its type's name first, as net/http's MethodGet and StatusOK
// (ARCHITECTURE.md, "Shared vocabulary"), so strategy.VerdictWait and
// strategy.OutcomeInPlace cannot be mistaken for each other. It reads
// every package of every module but the examples, hack's tools and
// internal ones; a constant in a block that takes its type from the line
// before (iota) counts as of that type.
func TestConstantsCarryTheirTypeName(t *testing.T) {
	var dirs []string
	require.NoError(t, filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		switch {
		case path == ".":
		case strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "internal" || path == "examples" || path == "hack":
			return filepath.SkipDir
		default:
			dirs = append(dirs, path)
		}
		return nil
	}))
	require.Contains(t, dirs, filepath.Join("strategy", "capi"))
	for _, dir := range dirs {
		fset := token.NewFileSet()
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			require.NoError(t, err)
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				var last ast.Expr // a spec without type or value repeats the one before (iota)
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					switch {
					case vs.Type != nil:
						last = vs.Type
					case len(vs.Values) > 0:
						last = nil
					}
					typ, ok := last.(*ast.Ident)
					if !ok || !typ.IsExported() {
						continue
					}
					for _, n := range vs.Names {
						if n.IsExported() && !strings.HasPrefix(n.Name, typ.Name) {
							t.Errorf("%s: %s.%s of type %s: spell it %s%s", fset.Position(n.Pos()), dir, n.Name, typ.Name, typ.Name, n.Name)
						}
					}
				}
			}
		}
	}
}
