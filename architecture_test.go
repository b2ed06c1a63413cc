package upgradekit_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/upgradekit/upgradekit"

// layerRule is one row of ARCHITECTURE.md's table of packages: what each
// may import of ours (directly) and what none of its dependencies may be.
type layerRule struct {
	packages []string // the row's packages, relative to the module root
	module   bool     // the packages are a Go module of their own
	may      []string // entries: a package, or "dir/..." for a tree; nil with anything
	anything bool     // "anything"
	never    []string // packages none of its dependencies may be (a tree each)
}

// readLayerRules parses the table under "| package | may import (ours) |".
// Text in parentheses explains; only the backticked names outside them
// are rules.
func readLayerRules(t *testing.T, path string) []layerRule {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	paren := regexp.MustCompile(`\([^()]*\)`)
	tick := regexp.MustCompile("`([^`]+)`")
	names := func(cell string) []string {
		for paren.MatchString(cell) {
			cell = paren.ReplaceAllString(cell, "")
		}
		var out []string
		for _, m := range tick.FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
		return out
	}
	var rules []layerRule
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "| package | may import (ours) | never imports |"):
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 3, "ARCHITECTURE.md: a row of three cells: %s", line)
		r := layerRule{packages: names(cells[0]), module: strings.Contains(cells[0], "own Go module"), may: names(cells[1]), never: names(cells[2])}
		r.anything = strings.TrimSpace(cells[1]) == "anything"
		require.NotEmpty(t, r.packages, "ARCHITECTURE.md: a row names no package: %s", line)
		rules = append(rules, r)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, rules, "ARCHITECTURE.md has no table of packages")
	return rules
}

// matches says whether pkg is entry's package, or in entry's tree for
// "dir/..." (and, with tree, for any entry).
func matches(pkg, entry string, tree bool) bool {
	if dir, ok := strings.CutSuffix(entry, "/..."); ok {
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	}
	return pkg == entry || (tree && strings.HasPrefix(pkg, entry+"/"))
}

// layerViolations checks one package against its rule: imports are its
// direct imports of ours, deps all its dependencies of ours (relative
// paths, no test files).
func layerViolations(pkg string, r layerRule, imports, deps []string) []string {
	var out []string
	if !r.anything {
		for _, imp := range imports {
			if !slices.ContainsFunc(r.may, func(e string) bool { return matches(imp, e, false) }) {
				out = append(out, pkg+" imports "+imp+", which its row's \"may import\" does not list")
			}
		}
	}
	for _, d := range deps {
		for _, never := range r.never {
			if matches(d, never, true) {
				out = append(out, pkg+" depends on "+d+", which its row's \"never imports\" forbids ("+never+")")
			}
		}
	}
	return out
}

// moduleDirs lists the directories of the repository's Go modules,
// relative to its root ("." for the root module), sorted.
func moduleDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			dirs = append(dirs, filepath.ToSlash(filepath.Dir(path)))
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(dirs)
	return dirs
}

// goList lists, for the packages matching pattern in dir, each one's
// direct imports and dependencies of this module.
func goList(t *testing.T, dir, pattern string) map[string][2][]string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", pattern)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off") // each module on its own go.mod, in go.work or not
	out, err := cmd.Output()
	require.NoError(t, err, "go list %s in %s", pattern, dir)
	ours := func(list string) []string {
		var rel []string
		for _, p := range strings.Fields(list) {
			if r, ok := strings.CutPrefix(p, modulePath+"/"); ok {
				rel = append(rel, r)
			}
		}
		return rel
	}
	got := map[string][2][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		pkg, _ := strings.CutPrefix(parts[0], modulePath+"/")
		got[pkg] = [2][]string{ours(parts[1]), ours(parts[2])}
	}
	return got
}

// TestArchitectureIsTheImportGraph holds every row of ARCHITECTURE.md's
// table of packages to `go list`: each package imports of ours only what
// its row allows, and depends on nothing its row forbids.
func TestArchitectureIsTheImportGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module and its nested modules")
	}
	rules := readLayerRules(t, "ARCHITECTURE.md")
	// Every module's packages, each listed in its own module (on its own
	// go.mod, as CI builds it).
	graph := map[string][2][]string{}
	for _, dir := range moduleDirs(t) {
		if strings.HasPrefix(dir, "hack/") {
			continue
		}
		for p, g := range goList(t, filepath.FromSlash(dir), "./...") {
			graph[p] = g
		}
	}
	checked := 0
	var wrong []string
	for _, r := range rules {
		for _, p := range r.packages {
			if r.anything || p == "examples/..." {
				continue
			}
			got, ok := graph[p]
			require.True(t, ok, "ARCHITECTURE.md names %s, which is no package", p)
			wrong = append(wrong, layerViolations(p, r, got[0], got[1])...)
			checked++
		}
	}
	require.Empty(t, wrong, "ARCHITECTURE.md and the import graph disagree")
	require.GreaterOrEqual(t, checked, 15, "the table's rows were read")
	// Every package of every module but the root, examples, hack and
	// internal ones has a row.
	var missing []string
	for p := range graph {
		if p == modulePath || strings.HasPrefix(p, "examples/") || strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/") || strings.HasPrefix(p, "hack/") {
			continue
		}
		if !slices.ContainsFunc(rules, func(r layerRule) bool { return slices.Contains(r.packages, p) }) {
			missing = append(missing, p)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "packages without a row in ARCHITECTURE.md's table")
}

// TestArchitectureCheckFailsOnAWrongImport: the check above is not vacuous:
// a leaf that imports strategy, or a package that reaches a forbidden one
// through another, is reported.
func TestArchitectureCheckFailsOnAWrongImport(t *testing.T) {
	diffRule := layerRule{packages: []string{"diff"}, may: []string{"internal/memzero"}}
	require.Empty(t, layerViolations("diff", diffRule, []string{"internal/memzero"}, []string{"internal/memzero"}))
	require.Equal(t, []string{`diff imports strategy, which its row's "may import" does not list`},
		layerViolations("diff", diffRule, []string{"strategy"}, nil))
	strategyRule := layerRule{packages: []string{"strategy"}, may: []string{"diff", "drift", "internal/..."}, never: []string{"nodeexec", "fake"}}
	require.Empty(t, layerViolations("strategy", strategyRule, []string{"diff", "internal/errtext"}, []string{"diff", "internal/errtext"}))
	require.Equal(t, []string{`strategy depends on nodeexec/kubeadm, which its row's "never imports" forbids (nodeexec)`},
		layerViolations("strategy", strategyRule, []string{"drift"}, []string{"drift", "nodeexec/kubeadm"}))
	require.Equal(t, []string{`strategy imports internalish, which its row's "may import" does not list`},
		layerViolations("strategy", strategyRule, []string{"internalish"}, nil), "a tree is a path prefix, not a string prefix")
}

// TestArchitectureListsTheModules holds ARCHITECTURE.md's table of modules
// to the go.mod files in the tree (hack's tool modules aside), and each
// row of the package table marked "own Go module" to a module's directory.
func TestArchitectureListsTheModules(t *testing.T) {
	b, err := os.ReadFile("ARCHITECTURE.md")
	require.NoError(t, err)
	var listed []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| module (directory) |"):
			in = true
		case !in || strings.HasPrefix(line, "|---"):
		case !strings.HasPrefix(line, "|"):
			in = false
		default:
			m := regexp.MustCompile("^\\| `([^`]+)` \\|").FindStringSubmatch(line)
			require.NotNil(t, m, "ARCHITECTURE.md: a module row starts with its directory: %s", line)
			listed = append(listed, m[1])
		}
	}
	var dirs []string
	for _, d := range moduleDirs(t) {
		if !strings.HasPrefix(d, "hack/") {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(listed)
	require.Equal(t, dirs, listed, "ARCHITECTURE.md's table of modules and the go.mod files in the tree")
	for _, r := range readLayerRules(t, "ARCHITECTURE.md") {
		if r.module {
			for _, p := range r.packages {
				require.Contains(t, dirs, p, "ARCHITECTURE.md marks %s as its own Go module", p)
			}
		}
	}
}

// TestTheCoreModuleNeedsNoCluster: a program that imports diff, drift and
// strategy (a new module next to the test, the root module replaced by
// this checkout) gets none of the Cluster API runtime side's dependencies
// in its module graph. A root package that starts to need one fails here;
// it belongs in one of the other modules (ARCHITECTURE.md, "Modules").
func TestTheCoreModuleNeedsNoCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy in a new module")
	}
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/consumer\n\ngo 1.26.0\n\n"+
		"require "+modulePath+" v0.0.0\n\nreplace "+modulePath+" => "+root+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import (
	"fmt"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/strategy"
)

func main() { fmt.Println(diff.ObjectBootstrap, drift.StateDrifted, strategy.VerdictAllow) }
`), 0o644))
	run := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
	run("mod", "tidy")
	run("build", "-o", os.DevNull, ".")
	var mods []string
	for _, line := range strings.Split(strings.TrimSpace(run("list", "-m", "all")), "\n") {
		mods = append(mods, strings.Fields(line)[0])
	}
	for _, heavy := range []string{
		"sigs.k8s.io/controller-runtime", "sigs.k8s.io/cluster-api", "k8s.io/client-go", "k8s.io/kubectl",
		"go.etcd.io/etcd/client/v3", "google.golang.org/grpc", "github.com/prometheus/client_golang",
	} {
		require.NotContains(t, mods, heavy, "the consumer's module graph")
	}
	require.Contains(t, mods, "sigs.k8s.io/cluster-api/api", "the consumer gets Cluster API's API types")
	t.Logf("a program importing diff, drift and strategy: %d modules in its graph", len(mods))
}

// TestTheWorkspaceBuildsWhatEachModuleBuilds backs `make test`, which runs
// the tests of go.work's modules in one `go test` through go.work: for
// every package those tests build, the workspace selects the module
// version that module's own go.mod selects, so a test passes or fails as it
// would in a build of that module alone.
func TestTheWorkspaceBuildsWhatEachModuleBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over every module twice")
	}
	work, err := filepath.Abs("go.work")
	require.NoError(t, err)
	b, err := os.ReadFile(work)
	require.NoError(t, err)
	var used []string
	for _, line := range strings.Split(string(b), "\n") {
		if d := strings.TrimSpace(line); strings.HasPrefix(d, ".") {
			used = append(used, d)
		}
	}
	require.Contains(t, used, ".", "go.work uses the root module")
	require.Greater(t, len(used), 5, "go.work's modules were read")
	built := func(dir, gowork string) []string {
		cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "./...")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK="+gowork, "GOFLAGS=")
		out, err := cmd.Output()
		require.NoError(t, err, "go list in %s (GOWORK=%s)", dir, gowork)
		var mods []string
		for _, m := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if m != "" && !strings.HasPrefix(m, modulePath) && !slices.Contains(mods, m) {
				mods = append(mods, m)
			}
		}
		slices.Sort(mods)
		return mods
	}
	for _, dir := range used {
		alone := built(dir, "off")
		require.NotEmpty(t, alone, "%s builds modules", dir)
		require.Equal(t, alone, built(dir, work), "the versions module %s's packages and tests build with: alone (-) and in the workspace (+)", dir)
	}
}
