package cliconvention

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryExampleFollowsTheConvention builds each example and runs it as
// a user would, asserting exit codes and what is printed.
func TestEveryExampleFollowsTheConvention(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every example binary")
	}
	bin := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	names := []string{"ami-resolve", "inplace-extension", "preview", "simulate", "upgrader"}
	build := exec.CommandContext(t.Context(), "go", append([]string{"build", "-o", bin + "/"}, prefixed("./examples/", names)...)...)
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))
	// drift-explain is its own module (its -karpenter mode needs the
	// karpenter module, which the core must not depend on).
	build = exec.CommandContext(t.Context(), "go", "build", "-o", bin+"/", ".")
	build.Dir = filepath.Join(root, "examples", "drift-explain")
	out, err = build.CombinedOutput()
	require.NoError(t, err, string(out))
	ami := filepath.Join(root, "examples", "ami-resolve", "testdata")
	de := filepath.Join(root, "examples", "drift-explain", "testdata")
	kd := filepath.Join(root, "karpenter", "testdata", "dump")

	for _, tc := range []struct {
		name     string
		args     []string
		env      []string
		exit     int
		printed  string // in stdout or stderr
		once     string // printed exactly once
		notShown string
	}{
		// -h exits 0 everywhere.
		{"ami-resolve", []string{"-h"}, nil, 0, "usage: ami-resolve", "", ""},
		{"drift-explain", []string{"-h"}, nil, 0, "usage: drift-explain", "", ""},
		{"inplace-extension", []string{"-h"}, nil, 0, "-kubeconfig", "", ""},
		{"simulate", []string{"-h"}, nil, 0, "-flaky", "", ""},
		{"preview", []string{"-h"}, nil, 0, "usage: preview", "", ""},
		{"preview", []string{"preview", "-h"}, nil, 0, "kubectl upgradekit preview", "", ""},
		{"upgrader", []string{"-h"}, nil, 0, "usage", "", ""},

		// An unknown flag: exit 2, said once.
		{"ami-resolve", []string{"-no-such-flag"}, nil, 2, "", "flag provided but not defined", ""},
		{"drift-explain", []string{"-no-such-flag"}, nil, 2, "", "flag provided but not defined", ""},
		{"inplace-extension", []string{"-no-such-flag"}, nil, 2, "", "flag provided but not defined", ""},
		{"simulate", []string{"-no-such-flag"}, nil, 2, "", "flag provided but not defined", ""},
		{"preview", []string{"-no-such-flag"}, nil, 2, "", "flag provided but not defined", ""},
		{"upgrader", []string{"run", "-no-such-flag"}, nil, 2, "", "flag provided but not defined", ""},

		// Other usage errors: exit 2; names a flag refers to are checked.
		{"ami-resolve", []string{"only-one-arg"}, nil, 2, "want 2 arguments", "", ""},
		{"ami-resolve", []string{"-kubernetes-version", "latest", ami + "/terms.yaml", ami + "/catalog.json"}, nil, 2, "-kubernetes-version", "", ""},
		{"drift-explain", []string{"-stamp", "-proposed", "x", "a", "b"}, nil, 2, "cannot be combined", "", ""},
		{"inplace-extension", []string{"-no-update-machine", "-in-place", "KubernetesVerison"}, nil, 2, `unknown category "KubernetesVerison"`, "", ""},
		{"inplace-extension", []string{"-upgrader-image", "x", "-maintenance-window", "0 2 * * *", "-maintenance-timezone", "Europe/Berln"}, nil, 2, "time zone", "", ""},
		{"simulate", []string{"-fail", "nosuch/kubelet=1"}, nil, 2, `no node "nosuch"`, "", ""},
		{"simulate", []string{"-crash", "demo-md-0-0/nosuchstep"}, nil, 2, `no step "nosuchstep"`, "", ""},
		{"simulate", []string{"-new-image", "nosuch"}, nil, 2, `no machine deployment "nosuch"`, "", ""},
		{"simulate", []string{"-on-failure", "retry"}, nil, 2, `-on-failure: unknown "retry" (stall, continue)`, "", ""},
		{"upgrader", []string{"nosuchcommand"}, nil, 2, "unknown command", "", ""},
		{"preview", []string{"-f", "change.yaml"}, nil, 2, "-cluster is required", "", ""},
		{"preview", []string{"-cluster", "demo", "-in-place", "KubernetesVerison"}, nil, 2, `unknown category "KubernetesVerison"`, "", ""},
		{"preview", []string{"-cluster", "demo", "-f", filepath.Join(t.TempDir(), "missing.yaml")}, nil, 2, "no such file", "", ""},

		// Findings have their own codes; errors are 1.
		{"ami-resolve", []string{ami + "/invalid.yaml", ami + "/catalog.json"}, nil, 3, "invalid: amiSelectorTerms", "", ""},
		{"ami-resolve", []string{"-kubernetes-version", "1.31", ami + "/terms.yaml", filepath.Join(t.TempDir(), "missing.json")}, nil, 1, "no such file", "", ""},
		{"drift-explain", []string{de + "/nodepool.yaml", de + "/nodes.yaml"}, nil, 3, "1 of 3 objects drifted", "", ""},
		{"drift-explain", []string{"-karpenter", kd + "/cluster.yaml"}, nil, 3, "6 of 13 NodeClaims drifted", "", ""},
		{"drift-explain", []string{"-karpenter", "-o", "yaml", kd + "/cluster.yaml"}, nil, 2, "want table or json", "", ""},
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=1", "-new-image", "", "-fail", "demo-md-0-0/kubelet=9"}, nil, 3, "failed: demo-md-0-0", "", ""},
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=1", "-new-image", "md-0", "-strategy", "inplace-only"}, nil, 4, "Blocked: 1 machines", "", ""},
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=1", "-new-image", ""}, nil, 0, "Invariants held", "", ""},
		// A failed machine stalls its machine deployment as Cluster API's
		// would; -on-failure continue plays on.
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=3", "-new-image", "", "-fail", "demo-md-0-0/containerd=9"}, nil, 3,
			"Held back: demo-md-0-2 (1 failed machines of the group stay unavailable while Cluster API retries them; the limit (maxSurge+maxUnavailable) is 1)", "", ""},
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=3", "-new-image", "", "-fail", "demo-md-0-0/containerd=9", "-on-failure", "continue"}, nil, 3,
			"demo-md-0-2              InPlace verify                 Succeeded", "", "Held back"},
		// No cluster to talk to: one line, no stack trace.
		{"inplace-extension", []string{"-upgrader-image", "x@sha256:" + strings.Repeat("a", 64), "-allow-unverified-bundles"}, []string{"KUBECONFIG=", "HOME=" + t.TempDir()}, 1, "management cluster config", "", "stacktrace"},
		{"inplace-extension", []string{"-upgrader-image", "x:v1", "-allow-unverified-bundles"}, nil, 2, "is not pinned by digest", "", ""},
		{"preview", []string{"-cluster", "demo"}, []string{"KUBECONFIG=", "HOME=" + t.TempDir()}, 1, "management cluster config", "", "stacktrace"},

		// -version (--version too) prints the build's version line and exits 0.
		{"ami-resolve", []string{"--version"}, nil, 0, "ami-resolve github.com/upgradekit/upgradekit", "", ""},
		{"drift-explain", []string{"-version"}, nil, 0, "drift-explain github.com/upgradekit/upgradekit", "", ""},
		{"inplace-extension", []string{"--version"}, nil, 0, "inplace-extension github.com/upgradekit/upgradekit", "", ""},
		{"simulate", []string{"-version"}, nil, 0, "simulate github.com/upgradekit/upgradekit", "", ""},
		{"preview", []string{"--version"}, nil, 0, "kubectl-upgradekit github.com/upgradekit/upgradekit", "", ""},
		{"upgrader", []string{"--version"}, nil, 0, "upgrader github.com/upgradekit/upgradekit", "", ""},
		{"upgrader", []string{"version"}, nil, 0, "upgrader github.com/upgradekit/upgradekit", "", ""},

		// An empty result is not an error (kubectl get's "No resources found").
		{"upgrader", []string{"status", "-journal-dir", t.TempDir()}, nil, 0, "No journals found in", "", ""},
		{"upgrader", []string{"status", "-o", "json", "-journal-dir", t.TempDir()}, nil, 0, "No journals found in", "", ""},
	} {
		t.Run(tc.name+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), filepath.Join(bin, tc.name), tc.args...)
			cmd.Env = append(os.Environ(), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			all := stdout.String() + stderr.String()
			require.Equal(t, tc.exit, code, all)
			require.Contains(t, all, tc.printed)
			if tc.once != "" {
				require.Equal(t, 1, strings.Count(all, tc.once), "printed once: %s", all)
			}
			if tc.notShown != "" {
				require.NotContains(t, all, tc.notShown)
			}
		})
	}
}

func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}
