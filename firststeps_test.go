package upgradekit_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The variables harness/apiserver reads (its SkipEnvVar and RequireEnvVar;
// harness/apiserver's TestTheMakefileSetsTheEnvVars holds them to these).
const (
	skipEnvVar    = "UPGRADEKIT_SKIP_ENVTEST"
	requireEnvVar = "UPGRADEKIT_REQUIRE_ENVTEST"
)

// readmeSection returns the README's section under heading (up to the next
// "## " heading).
func readmeSection(t *testing.T, readme, heading string) string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "README.md has a %q section", heading)
	rest := readme[i+len(heading)+2:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// makeTargets are the targets the Makefile defines, with their recipes.
func makeTargets(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("Makefile")
	require.NoError(t, err)
	out := map[string]string{}
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		if m := regexp.MustCompile(`^([a-z][a-z0-9-]*):`).FindStringSubmatch(line); m != nil {
			cur = m[1]
			out[cur] = ""
			continue
		}
		if cur != "" && strings.HasPrefix(line, "\t") {
			out[cur] += line + "\n"
		} else if !strings.HasPrefix(line, "\t") {
			cur = ""
		}
	}
	return out
}

// TestREADMEFirstSteps holds the README's first steps to what runs on a
// fresh clone: the demo first, then `make unit`, which builds nothing and
// skips what needs built binaries, then `make test`, CI's command, under
// which a test that needs kube-apiserver and etcd fails rather than skips;
// every make target the README names exists, every `go run`/`go test`
// path is a directory of the repository, and the demo's versions are the
// ones the README gives.
func TestREADMEFirstSteps(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	readme := string(b)
	steps := readmeSection(t, readme, "## First steps")

	var commands []string
	for _, m := range regexp.MustCompile("(?s)```\n(.*?)\n```").FindAllStringSubmatch(steps, -1) {
		commands = append(commands, strings.TrimSpace(m[1]))
	}
	require.Equal(t, []string{"go run ./examples/simulate", "make unit", "make test"}, commands,
		"the first steps lead with what runs at once")

	targets := makeTargets(t)
	require.Contains(t, targets, "unit")
	require.Contains(t, targets["unit"], skipEnvVar+"=1", "make unit skips the tests that need envtest")
	for _, heavy := range []string{"hack/envtest-assets.sh", "hack/capi-managers.sh", "hack/capi-inplace-oracle.sh"} {
		require.NotContains(t, targets["unit"], heavy, "make unit builds nothing first")
	}
	require.Contains(t, targets["test"], requireEnvVar+"=1", "under make test a missing kube-apiserver fails a test")
	require.Contains(t, targets["e2e"], requireEnvVar+"=1")
	ci, err := os.ReadFile(".ci/run")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^make test$`, string(ci), "CI runs make test")
	require.Regexp(t, `(?m)^export `+requireEnvVar+`=1$`, string(ci))

	// Every make target the README names exists.
	for _, m := range regexp.MustCompile("(?m)(?:^|`)make ([a-z][a-z0-9-]*)").FindAllStringSubmatch(readme, -1) {
		require.Contains(t, targets, m[1], "README.md names make %s", m[1])
	}
	// Every go run / go test path is a directory here.
	for _, m := range regexp.MustCompile(`go (?:run|test) (\./[A-Za-z0-9_/.-]*)`).FindAllStringSubmatch(readme, -1) {
		dir := strings.TrimSuffix(strings.TrimSuffix(m[1], "..."), "/")
		if dir == "." {
			continue
		}
		fi, err := os.Stat(dir)
		require.NoError(t, err, "README.md: go run/test %s", m[1])
		require.True(t, fi.IsDir(), m[1])
	}

	// The demo's default versions are the ones the README gives.
	src, err := os.ReadFile("examples/simulate/main.go")
	require.NoError(t, err)
	from := regexp.MustCompile(`fs\.StringVar\(&o\.from, "from", "([^"]+)"`).FindSubmatch(src)
	to := regexp.MustCompile(`fs\.StringVar\(&o\.to, "to", "([^"]+)"`).FindSubmatch(src)
	require.NotNil(t, from)
	require.NotNil(t, to)
	require.Contains(t, strings.Join(strings.Fields(steps), " "), "goes from "+string(from[1])+" to "+string(to[1]))
}
