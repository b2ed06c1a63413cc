package upgradekit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConstantsCarryTheirTypeName: an exported constant of a named type is
// spelled with its type's name first, as net/http's MethodGet and StatusOK
// (ARCHITECTURE.md, "Shared vocabulary"), so strategy.VerdictWait and
// strategy.OutcomeInPlace cannot be mistaken for each other. The packages
// listed follow the rule; add a package once its constants do.
func TestConstantsCarryTheirTypeName(t *testing.T) {
	// Not yet: diff (Machine of Object), drift (its ReasonName and
	// BumpAction constants) and simulator (its fault and host kinds).
	for _, dir := range []string{"strategy", "strategy/capi", "strategy/capi/gates", "nodeexec", "nodeexec/kubeadm", "amiselect"} {
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
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					typ, ok := vs.Type.(*ast.Ident)
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
