package tour_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCompatibilityMatrix: the README's compatibility table says the
// versions go.mod and the hack scripts use, and the floors it calls
// Cluster API's own are those of Cluster API's go.mod.
func TestCompatibilityMatrix(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	a := strings.Index(string(readme), "## Compatibility")
	require.GreaterOrEqual(t, a, 0, "README.md has a Compatibility section")
	table := string(readme)[a:]
	table = table[:strings.Index(table, "\n## ")]

	ours := parseMod(t, "../../go.mod")
	require.Contains(t, table, "`go "+ours.goVersion+"` in go.mod")
	req := func(f goMod, path string) string {
		v, ok := f.requires[path]
		require.True(t, ok, "%s requires %s", f.path, path)
		return v
	}
	// The Cluster API runtime side's module is the one that needs Cluster
	// API's core, controller-runtime and client-go; the root needs only
	// Cluster API's api module and apimachinery.
	side := parseMod(t, "../../strategy/capi/go.mod")
	require.Equal(t, req(ours, "sigs.k8s.io/cluster-api/api"), req(side, "sigs.k8s.io/cluster-api/api"))
	capi := req(side, "sigs.k8s.io/cluster-api")
	minor := capi[:strings.LastIndex(capi, ".")]
	require.Contains(t, table, "| "+minor+".x: "+capi+"'s core", "the Cluster API row names go.mod's version")
	require.Contains(t, table, "| controller-runtime | "+req(side, "sigs.k8s.io/controller-runtime")+" |")
	k8s := req(ours, "k8s.io/api")
	require.Equal(t, k8s, req(ours, "k8s.io/apimachinery"))
	require.Equal(t, k8s, req(side, "k8s.io/api"))
	require.Equal(t, k8s, req(side, "k8s.io/client-go"))
	require.Contains(t, table, "| k8s.io/api, apimachinery, client-go | "+k8s+" |")

	script, err := os.ReadFile("../../hack/envtest-assets.sh")
	require.NoError(t, err)
	for _, v := range []string{"KUBERNETES_VERSION", "ETCD_VERSION"} {
		m := regexp.MustCompile(v + `="\$\{` + v + `:-(v[0-9.]+)\}"`).FindSubmatch(script)
		require.NotNil(t, m, "hack/envtest-assets.sh sets a default %s", v)
		require.Contains(t, table, string(m[1]), "the table names the %s envtest runs", v)
	}

	// The Karpenter row names the karpenter module's versions.
	karp := parseMod(t, "../../karpenter/go.mod")
	require.Contains(t, table, "sigs.k8s.io/karpenter "+req(karp, "sigs.k8s.io/karpenter")+" and the AWS provider "+
		req(karp, "github.com/aws/karpenter-provider-aws"), "the Karpenter row names karpenter/go.mod's versions")
	require.Contains(t, table, "floor is Go "+karp.goVersion, "the Karpenter row names the karpenter module's go directive")

	// Cluster API's own floors, from its go.mod in the module cache.
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api").Output()
	require.NoError(t, err)
	theirs := parseMod(t, filepath.Join(strings.TrimSpace(string(out)), "go.mod"))
	require.Equal(t, theirs.goVersion, ours.goVersion, "our go directive is Cluster API's")
	require.Equal(t, req(theirs, "sigs.k8s.io/controller-runtime"), req(side, "sigs.k8s.io/controller-runtime"))
	require.Equal(t, req(theirs, "k8s.io/api"), k8s)
	require.Contains(t, table, "controller-runtime "+req(theirs, "sigs.k8s.io/controller-runtime")+" and k8s.io "+req(theirs, "k8s.io/api"))
}

// goMod is what these checks read of a go.mod: its go directive and
// requirements (one per line, as go mod tidy writes them).
type goMod struct {
	path      string
	goVersion string
	requires  map[string]string
}

func parseMod(t *testing.T, path string) goMod {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	f := goMod{path: path, requires: map[string]string{}}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		switch {
		case len(fields) == 2 && fields[0] == "go":
			f.goVersion = fields[1]
		case len(fields) >= 2 && strings.Contains(fields[0], ".") && strings.HasPrefix(fields[1], "v"):
			f.requires[fields[0]] = fields[1]
		}
	}
	require.NotEmpty(t, f.goVersion, "%s has a go directive", path)
	return f
}
