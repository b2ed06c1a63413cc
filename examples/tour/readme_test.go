package tour_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// These tests read the repository's README and sources; they are not
// copied with the tour into a consumer module.

// TestREADMEShowsTheTour: every step of tour.go is in README.md exactly
// as it is here, and so is each example's output.
func TestREADMEShowsTheTour(t *testing.T) {
	src, err := os.ReadFile("tour.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	steps := regexp.MustCompile(`(?s)// README:begin (\w+)\n\n(.*?)\n\n// README:end`).FindAllSubmatch(src, -1)
	require.Len(t, steps, 7, "tour.go has seven steps")
	tests, err := os.ReadFile("tour_test.go")
	require.NoError(t, err)
	for _, s := range steps {
		name, code := string(s[1]), string(s[2])
		require.Contains(t, string(readme), "```go\n"+code+"\n```", "README.md shows tour.%s as it is in examples/tour/tour.go", name)
		out := regexp.MustCompile(`(?s)func Example` + name + `\(\) \{\n.*?// Output:\n(.*?)\}\n`).FindSubmatch(tests)
		if out == nil {
			continue // no output of its own (AddExtension: TestAddExtension)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(string(out[1]), "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(l), "//"), " "))
		}
		require.Contains(t, string(readme), "```\n"+strings.Join(lines, "\n")+"\n```", "README.md shows what tour.%s prints", name)
	}
}

// TestEveryREADMESnippetIsCode: each Go block of README.md is, verbatim,
// part of a Go file of the repository, which CI compiles and tests; so no
// README snippet can be code that does not build.
func TestEveryREADMESnippetIsCode(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var sources []string
	require.NoError(t, filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources = append(sources, string(b))
		}
		return nil
	}))
	blocks := regexp.MustCompile("(?s)```go\n(.*?)\n```").FindAllSubmatch(readme, -1)
	require.NotEmpty(t, blocks)
	for _, b := range blocks {
		snippet := string(b[1])
		require.True(t, slices.ContainsFunc(sources, func(s string) bool { return strings.Contains(s, snippet) }),
			"README.md's Go block is in no Go file of the repository:\n%s", snippet)
	}
}

// TestExampleProgramsImportNothingInternal backs the README's "their
// main.go files use only the public packages": no example's non-test code
// imports this module's internal packages (its tests may).
func TestExampleProgramsImportNothingInternal(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = ".." // the examples module
	out, err := cmd.Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Greater(t, len(lines), 5, "the examples are listed")
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			require.False(t, strings.HasPrefix(imp, "github.com/upgradekit/upgradekit/internal"), "%s imports %s", pkg, imp)
		}
	}
}
