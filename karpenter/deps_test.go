package karpenter

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDependenciesPointOneWay backs ARCHITECTURE.md's rows for this
// module: of upgradekit it imports only drift, amiselect, strategy and
// internal/errtext (and what they import), never strategy/capi, nodeexec
// or fake; and the core module's graph holds nothing of Karpenter's.
func TestDependenciesPointOneWay(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	require.NoError(t, err)
	const ours = "github.com/upgradekit/upgradekit/"
	var imported []string
	for _, p := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(p, ours); ok && rest != "karpenter" {
			imported = append(imported, rest)
		}
	}
	require.Subset(t, imported, []string{"drift", "amiselect", "strategy", "internal/errtext"})
	for _, p := range imported {
		for _, never := range []string{"strategy/capi", "nodeexec", "fake", "examples"} {
			require.False(t, p == never || strings.HasPrefix(p, never+"/"), "the karpenter module imports %s", p)
		}
	}

	sum, err := os.ReadFile("../go.sum")
	require.NoError(t, err)
	for _, mod := range []string{"sigs.k8s.io/karpenter ", "github.com/aws/karpenter-provider-aws "} {
		require.NotContains(t, string(sum), mod, "the core module's graph holds %s", mod)
	}
}
