package entrypoints

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite zz_registry_test.go from the packages' sources")

// scanned are the packages whose exported API is called with hostile
// input: the library and the simulator package users build tests on.
// harness/apiserver, harness/clusterapi and harness/kubeadmnode are not: their entry
// points start kube-apiserver, etcd, Cluster API's managers or real nodes
// (network namespaces, mounts, containerd), or run the go command; their
// argument checks are tested in their own packages.
var scanned = []struct{ dir, alias string }{
	{"diff", "diff"},
	{"drift", "drift"},
	{"amiselect", "amiselect"},
	{"strategy", "strategy"},
	{"strategy/capi", "capi"},
	{"strategy/capi/extensionserver", "extensionserver"},
	{"strategy/capi/preview", "preview"},
	{"strategy/capi/gatereport", "gatereport"},
	{"strategy/capi/gates", "gates"},
	{"strategy/capi/workload", "workload"},
	{"nodeexec", "nodeexec"},
	{"nodeexec/kubeadm", "kubeadm"},
	{"nodeexec/nodepod", "nodepod"},
	{"nodeexec/drain", "drain"},
	{"simulator", "simulator"},
	{"simulator/timeline", "timeline"},
}

// excluded are exported functions and methods not called here, each with
// the reason and where its input checks are tested instead.
var excluded = map[string]string{
	"nodeexec.OSExecutor.Run":          "runs argv on this host; TestOSExecutorResults, TestRunnerEntersRealNamespaces",
	"nodeexec.Runner.Run":              "runs a plan's argv on this host and writes its journal; TestInvalidPlanRunsNothing, TestBadJournalsRunNothingAndLoseNothing",
	"nodeexec.Runner.Rollback":         "runs a plan's rollback argv on this host; TestRollbackRefusals",
	"nodeexec.Runner.Reset":            "deletes a journal file on this host; TestJournalNamesStayInTheJournalDirectory",
	"nodeexec.FileJournalStore.Init":   "creates a directory on this host; TestJournalStoresBehaveAlike, TestRollbackAndResetFindNoJournalInAnEmptyStore",
	"nodeexec.FileJournalStore.Lock":   "creates a lock file on this host; TestJournalStoresBehaveAlike (names that are not a plan's are refused)",
	"nodeexec.FileJournalStore.Write":  "writes a file on this host; TestJournalStoresBehaveAlike (names that are not a plan's are refused)",
	"nodeexec.FileJournalStore.Remove": "deletes a file on this host; TestJournalStoresBehaveAlike (names that are not a plan's are refused)",
	"extensionserver.Server.Start":     "listens on a port until its context ends; TestStartRefusesAZeroServer, TestEmbedInAManager",
}

const modulePath = "github.com/upgradekit/upgradekit"

// scan lists the exported, non-generic functions and methods (on exported
// types) of the scanned packages as registry names ("pkg.Func",
// "pkg.Type.Method") with the Go expression that denotes each, and the
// exported error variables.
func scan(t *testing.T) (funcs map[string]string, sentinels []string) {
	t.Helper()
	funcs = map[string]string{}
	for _, p := range scanned {
		dir := filepath.Join("..", "..", p.dir)
		fset := token.NewFileSet()
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			if strings.HasSuffix(f.Name.Name, "_test") {
				continue
			}
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || d.Type.TypeParams != nil {
						continue
					}
					if d.Recv == nil {
						funcs[p.alias+"."+d.Name.Name] = p.alias + "." + d.Name.Name
						continue
					}
					typ, ptr, ok := receiver(d.Recv.List[0].Type)
					if !ok || !ast.IsExported(typ) {
						continue
					}
					expr := p.alias + "." + typ + "." + d.Name.Name
					if ptr {
						expr = "(*" + p.alias + "." + typ + ")." + d.Name.Name
					}
					funcs[p.alias+"."+typ+"."+d.Name.Name] = expr
				case *ast.GenDecl:
					if d.Tok != token.VAR {
						continue
					}
					for _, s := range d.Specs {
						for _, name := range s.(*ast.ValueSpec).Names {
							if name.IsExported() && strings.HasPrefix(name.Name, "Err") {
								sentinels = append(sentinels, p.alias+"."+name.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(sentinels)
	return funcs, sentinels
}

// receiver returns a method's receiver type name and whether it is a
// pointer; ok is false for generic receivers.
func receiver(e ast.Expr) (name string, ptr, ok bool) {
	if s, isStar := e.(*ast.StarExpr); isStar {
		e, ptr = s.X, true
	}
	id, isIdent := e.(*ast.Ident)
	if !isIdent {
		return "", false, false
	}
	return id.Name, ptr, true
}

// generate renders zz_registry_test.go.
func generate(funcs map[string]string, sentinels []string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by TestRegistryIsComplete -update. DO NOT EDIT.\n\npackage entrypoints\n\nimport (\n\t\"reflect\"\n\n")
	for _, p := range scanned {
		fmt.Fprintf(&b, "\t%s %q\n", p.alias, modulePath+"/"+p.dir)
	}
	b.WriteString(")\n\n// registry holds every exported function and method of the scanned\n// packages that is not excluded, by name.\nvar registry = map[string]reflect.Value{\n")
	names := make([]string, 0, len(funcs))
	for n := range funcs {
		if _, ok := excluded[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\t%q: reflect.ValueOf(%s),\n", n, funcs[n])
	}
	b.WriteString("}\n\n// sentinels are the exported errors of the scanned packages.\nvar sentinels = []error{\n")
	for _, s := range sentinels {
		fmt.Fprintf(&b, "\t%s,\n", s)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

// TestRegistryIsComplete: every exported function and method of the
// scanned packages is called by the hostile-input tests, or excluded with
// a reason. A new entry point fails this test until the registry is
// regenerated (-update), and so is then called like the others.
func TestRegistryIsComplete(t *testing.T) {
	funcs, sentinels := scan(t)
	for n := range excluded {
		require.Contains(t, funcs, n, "excluded entry point %s no longer exists", n)
	}
	want, err := generate(funcs, sentinels)
	require.NoError(t, err)
	const file = "zz_registry_test.go"
	if *update {
		require.NoError(t, os.WriteFile(file, want, 0o644))
		return
	}
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(string(want), string(got)),
		"the registry is out of date: go test ./internal/entrypoints -run TestRegistryIsComplete -update")
}
