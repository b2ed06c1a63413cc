package diff_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/diff"
)

// TestBuiltinCategoriesListsEveryConstant: every Category constant the
// package declares is in BuiltinCategories, and nothing else is (a
// constant missing from the list would make strategy.ForCategories refuse
// it).
func TestBuiltinCategoriesListsEveryConstant(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "change.go", nil, 0) // where the constants are declared
	require.NoError(t, err)
	var declared []string
	{
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Category" {
					for _, v := range vs.Values {
						lit := v.(*ast.BasicLit)
						declared = append(declared, lit.Value[1:len(lit.Value)-1])
					}
				}
			}
		}
	}
	var listed []string
	for _, c := range diff.BuiltinCategories() {
		listed = append(listed, string(c))
	}
	require.Len(t, declared, 17)
	require.ElementsMatch(t, declared, listed)
}
