package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// hang bounds one run of the built plugin: far above what a run takes on
// a loaded machine under -race, only so a hang fails with its output
// instead of the whole test binary timing out.
const hang = 5 * time.Minute

// buildPlugin builds this command as the kubectl plugin kubectl-upgradekit
// into a temporary directory and returns its path.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-upgradekit")
	ctx, cancel := context.WithTimeout(t.Context(), hang)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

// kubeconfigFile writes a kubeconfig that reaches env's API server as its
// administrator and returns its path.
func kubeconfigFile(t *testing.T, env *apiserver.Env) string {
	t.Helper()
	kubeconfig, err := env.Kubeconfig("demo")
	require.NoError(t, err)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kc, kubeconfig, 0o600))
	return kc
}

// runPlugin runs the built plugin as kubectl runs it (kubectl upgradekit
// ARGS runs kubectl-upgradekit ARGS) and returns what it printed and its
// exit code.
func runPlugin(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hang)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// Outside a cluster, as a user runs it (the extension's URL is called
	// directly either way).
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=")
	cmd.WaitDelay = time.Minute
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%v did not finish: %s%s", args, out.String(), errOut.String())
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &ee, "%v: %s", args, errOut.String())
		return out.String(), errOut.String(), ee.ExitCode()
	}
	return out.String(), errOut.String(), 0
}

// TestBuiltPluginAsksTheDeployedExtension (issue 31): the built plugin,
// run as a user runs it with a kubeconfig, asks the in-place extension
// the cluster's ExtensionConfig registers, over HTTPS, and that
// extension's configuration decides, not the plugin's flags. The deployed
// extension has an upgrader image for v1.37.0 only: it answers a Failure
// for md-0's and md-2's move to v1.36.3, so Cluster API waits (Blocked,
// exit 4). The same flags in process accept both in place, leaving md-1's
// new machine image a replacement (exit 3). The workload cluster is not
// read, so no drain blocker hides the difference.
func TestBuiltPluginAsksTheDeployedExtension(t *testing.T) {
	env, file := demoCluster(t)
	c := commandClient(t, env)
	bin := buildPlugin(t)
	base := []string{"preview", "--kubeconfig", kubeconfigFile(t, env), "--cluster", "demo", "-f", file, "--workload=false"}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }

	// No ExtensionConfig: --mode extension has no one to ask.
	out, errOut, code := runPlugin(t, bin, with("--mode", "extension")...)
	require.Equal(t, exitError, code, "%s%s", out, errOut)
	require.Contains(t, errOut, "kubectl upgradekit preview: --mode extension: no in-place extension registered")
	require.Empty(t, out)

	registerServed(t, c, "upgradekit", extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{"v1.37.0": "registry.example/upgrader:v1.37.0"}}})

	// Flags that, in process, accept v1.36.3 in place.
	accepting := [][]string{
		nil, // the defaults: any version, one image
		{"--upgrader-images", "v1.36.3=registry.example/upgrader:v1.36.3"},
		{"--upgrader-image", "registry.example/upgrader:any", "--in-place", defaultCategories()},
		{"--no-update-machine"},
	}
	var first string
	for _, flags := range accepting {
		for _, mode := range [][]string{{"--mode", "extension"}, {"--mode=extension"}, nil} { // nil: auto, the default
			args := with(append(append([]string(nil), flags...), mode...)...)
			out, errOut, code := runPlugin(t, bin, args...)
			require.Equal(t, exitBlocked, code, "%v: the deployed extension answers a Failure: %s%s", args, out, errOut)
			require.Regexp(t, `md-0-abcde-0000 +md-0 +Blocked .*CanUpdateMachineSet answers Failure`, out, "%v", args)
			require.Regexp(t, `md-1-abcde-0000 +md-1 +Replace `, out, "%v", args)
			require.Regexp(t, `md-2-abcde-0000 +md-2 +Blocked .*CanUpdateMachineSet answers Failure`, out, "%v", args)
			require.Contains(t, out, "answered by the deployed extension (ExtensionConfig upgradekit)\n", "%v", args)
			require.Contains(t, errOut, "read and predicted 4 machines", "%v", args)
			if first == "" {
				first = out
			}
			require.Equal(t, first, out, "%v: the plugin's flags change nothing the deployed extension answers", args)
		}
	}

	// In process the same flags answer: md-0 and md-2 in place.
	for _, flags := range accepting {
		args := with(append(append([]string(nil), flags...), "--mode", "in-process")...)
		out, errOut, code := runPlugin(t, bin, args...)
		require.Equal(t, exitReplaced, code, "%v: md-1 only is replaced: %s%s", args, out, errOut)
		require.Regexp(t, `md-0-abcde-0000 +md-0 +InPlace `, out, "%v", args)
		require.Regexp(t, `md-1-abcde-0000 +md-1 +Replace `, out, "%v", args)
		require.Regexp(t, `md-2-abcde-0000 +md-2 +InPlace `, out, "%v", args)
		require.Contains(t, out, "answered in-process", "%v", args)
		require.NotContains(t, out, "answered by the deployed extension", "%v", args)
	}

	// The other way round: a deployed extension with an image for v1.36.3
	// accepts what the plugin's flags, in process, refuse.
	require.NoError(t, c.Delete(t.Context(), &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: "upgradekit"}}))
	registerServed(t, c, "upgradekit-v1-36", extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{"v1.36.3": "registry.example/upgrader:v1.36.3"}}})
	refusing := []string{"--upgrader-images", "v1.37.0=registry.example/upgrader:v1.37.0"}
	out, errOut, code = runPlugin(t, bin, with(append(refusing, "--mode", "extension")...)...)
	require.Equal(t, exitReplaced, code, "%s%s", out, errOut)
	require.Regexp(t, `md-0-abcde-0000 +md-0 +InPlace `, out)
	require.Regexp(t, `md-2-abcde-0000 +md-2 +InPlace `, out)
	require.Contains(t, out, "answered by the deployed extension (ExtensionConfig upgradekit-v1-36)\n")
	out, errOut, code = runPlugin(t, bin, with(append(refusing, "--mode", "in-process")...)...)
	require.Equal(t, exitBlocked, code, "%s%s", out, errOut)
	require.Regexp(t, `md-0-abcde-0000 +md-0 +Blocked .*CanUpdateMachineSet answers Failure`, out)
	require.Contains(t, out, "answered in-process")

	// The deployed extension's gates: without any, the report says so.
	out, errOut, code = runPlugin(t, bin, with("--mode", "extension")...)
	require.Equal(t, exitReplaced, code, "%s%s", out, errOut)
	require.Contains(t, out, "\n  gates now: none configured on the extension; asked again when Cluster API reaches each machine\n")
	// With a maintenance window that is closed, the machines it would
	// update in place are held, whatever the plugin's own gate flags say.
	window, err := strategy.MaintenanceWindow("maintenance-window", "30 4 3 1 *", time.Minute, "UTC")
	require.NoError(t, err)
	require.NoError(t, c.Delete(t.Context(), &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: "upgradekit-v1-36"}}))
	registerServed(t, c, "upgradekit-gated", extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{
		Images: capi.ImagesByVersion{"v1.36.3": "registry.example/upgrader:v1.36.3"}, Gates: []strategy.Gate{window}}})
	for _, flags := range [][]string{nil, {"--maintenance-window", "* * * * *"}} {
		out, errOut, code = runPlugin(t, bin, with(append(flags, "--mode", "extension")...)...)
		require.Equal(t, exitReplaced, code, "gates hold a rollout up, they do not change how: %s%s", out, errOut)
		require.Regexp(t, `\n  gates now: Wait by maintenance-window: outside the maintenance window "30 4 3 1 \*" \(1m0s, UTC\); .*; the gates hold 1 of 1 machines; asked again when Cluster API reaches each machine\n`, out)
		if flags != nil {
			require.Contains(t, errOut, "kubectl upgradekit preview: note: --maintenance-window, --soak and --blocking-pod-selector configure the in-process answer; the deployed extension's own gates answer\n")
		}
	}
	// In process, the plugin's gate flags give the gates.
	out, errOut, code = runPlugin(t, bin, with("--mode", "in-process", "--upgrader-images", "v1.36.3=registry.example/upgrader:v1.36.3", "--maintenance-window", "* * * * *", "--maintenance-duration", "1m")...)
	require.Equal(t, exitReplaced, code, "%s%s", out, errOut)
	require.Contains(t, out, "\n  gates now: open (maintenance-window); asked again when Cluster API reaches each machine\n")
}
