//go:build unix

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// TestUpgraderRunsTheExtensionsPod plays the kubelet for a pod built with
// the extension's own pod options: it runs every container of the pod in
// order, with its exact command and environment, the real upgrader binary
// (go build of examples/upgrader) standing for the image's /upgrader, and
// then reads the pod status it produced with nodepod.ReadStatus, as
// UpdateMachine does.
//
// What differs from a node, and why: the plan is a harmless one (it
// installs a fake kubeadm from the staged bundle into a temporary
// directory and checks its version) instead of a kubeadm plan, which would
// upgrade this machine; the runners get -direct appended, so steps run in
// this process's namespaces instead of through nsenter into PID 1 (the
// nsenter path is proved by examples/upgrader's TestPodContainersRunTheBinary,
// as root); the staging host path is a temporary directory
// (nodepod.WithStagingHostPath); the image's /staging is a temporary
// directory and its /bin/sh this machine's; and each container's
// termination log is a file of its own, read back as the kubelet does.
func TestUpgraderRunsTheExtensionsPod(t *testing.T) {
	image := t.TempDir() // the upgrader image's root filesystem
	build := exec.Command("go", "build", "-o", filepath.Join(image, "upgrader"), "github.com/upgradekit/upgradekit/examples/upgrader")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build examples/upgrader: %s", out)

	for _, tc := range []struct {
		name       string
		args       []string
		staged     string // the version the bundle's kubeadm reports
		wantPhase  nodepod.Phase
		wantFailed string // step
		wantExit   int32  // the failed step's own exit code
	}{
		{name: "init containers", staged: "v1.36.1", wantPhase: nodepod.PhaseSucceeded},
		{name: "single container", args: []string{"-upgrader-mode", "SingleContainer"}, staged: "v1.36.1", wantPhase: nodepod.PhaseSucceeded},
		{name: "init containers, wrong binaries in the bundle", staged: "v1.36.0", wantPhase: nodepod.PhaseFailed, wantFailed: "verify", wantExit: 7},
		{name: "single container, wrong binaries in the bundle", args: []string{"-upgrader-mode", "SingleContainer"}, staged: "v1.36.0",
			wantPhase: nodepod.PhaseFailed, wantFailed: "verify", wantExit: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			host := filepath.Join(dir, "var-lib-upgradekit") // the node's /var/lib/upgradekit
			binDir := filepath.Join(dir, "usr-bin")          // the node's /usr/bin
			bundle := filepath.Join(dir, "image-staging")    // the image's /staging
			require.NoError(t, os.MkdirAll(filepath.Join(bundle, "kubernetes"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(bundle, "kubernetes", "kubeadm"),
				[]byte("#!/bin/sh\n[ \"$*\" = \"version -o short\" ] || exit 2\necho "+tc.staged+"\n"), 0o755))

			staged := filepath.Join(host, "staging", "kubernetes", "kubeadm")
			installed := filepath.Join(binDir, "kubeadm")
			plan := nodeexec.Plan{Name: "handoff", Node: "node-a", Steps: []nodeexec.Step{
				{Name: "kubeadm-binary", Argv: nodeexec.ShellArgv(`set -eu; mkdir -p "$(dirname "$2")"; cp -f -- "$1" "$2"`, staged, installed),
					Timeout: time.Minute, NothingToUndo: true},
				{Name: "verify", Argv: nodeexec.ShellArgv(`got=$("$1" version -o short) || exit 1; [ "$got" = "$2" ] || { echo "kubeadm is $got, want $2" >&2; exit 7; }`, installed, "v1.36.1"),
					Timeout: time.Minute, NothingToUndo: true},
			}}

			o, err := parseFlags(append([]string{"-upgrader-image", "registry.example/upgradekit-upgrader:v1.36.1@" + testDigest, "-allow-unverified-bundles"}, tc.args...), &bytes.Buffer{})
			require.NoError(t, err)
			pod, err := nodepod.Build(plan, append(podOptionsOf(t, o), nodepod.WithStagingHostPath(host))...)
			require.NoError(t, err)

			// The kubelet: init containers one after the other, then the
			// main container; a failed container is restarted once, and
			// the pod stops there.
			var ran []string
			pod.Status.Phase = corev1.PodSucceeded
			for i, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
				init := i < len(pod.Spec.InitContainers)
				argv := slices.Clone(c.Command)
				env := []string{"PATH=/usr/bin:/bin"}
				termLog := filepath.Join(dir, "termination-log-"+c.Name)
				if c.Name == nodepod.StageContainer {
					require.Equal(t, "/bin/sh", argv[0])
					require.Equal(t, "/staging", argv[4])
					argv[4] = bundle
				} else {
					require.Equal(t, []string{"/upgrader", "run"}, argv)
					argv = append([]string{filepath.Join(image, "upgrader"), "run"}, "-direct")
				}
				termPath := c.TerminationMessagePath
				if termPath == "" {
					termPath = corev1.TerminationMessagePathDefault // the API server's default
				}
				for _, e := range c.Env {
					if e.Name == nodeexec.EnvSummaryFile {
						require.Equal(t, termPath, e.Value, "the summary goes where the kubelet reads the termination message")
						e.Value = termLog
					}
					env = append(env, e.Name+"="+e.Value)
				}
				run := func() *corev1.ContainerStateTerminated {
					t.Helper()
					require.NoError(t, os.RemoveAll(termLog)) // a new container, a new file
					cmd := exec.Command(argv[0], argv[1:]...)
					cmd.Env = env
					var output bytes.Buffer
					cmd.Stdout, cmd.Stderr = &output, &output
					err := cmd.Run()
					t.Logf("container %s: %v\n%s", c.Name, err, &output)
					term := &corev1.ContainerStateTerminated{Reason: "Completed"}
					var exit *exec.ExitError
					if errors.As(err, &exit) {
						term.ExitCode, term.Reason = int32(exit.ExitCode()), "Error"
					} else {
						require.NoError(t, err, "container %s", c.Name)
					}
					if msg, err := os.ReadFile(termLog); err == nil {
						term.Message = string(msg)
					}
					return term
				}
				cs := corev1.ContainerStatus{Name: c.Name, State: corev1.ContainerState{Terminated: run()}}
				failed := cs.State.Terminated.ExitCode != 0
				if failed {
					require.NotEqual(t, nodepod.StageContainer, c.Name, "staging works")
					require.Equal(t, int32(5), cs.State.Terminated.ExitCode, "container %s: the upgrader exits 5 for a Failed plan", c.Name)
					// restartPolicy OnFailure: the kubelet restarts it; the
					// runner finds the plan Failed in its journal, runs
					// nothing and exits the same way.
					cs.LastTerminationState, cs.RestartCount = cs.State, 1
					cs.State = corev1.ContainerState{Terminated: run()}
					require.Equal(t, int32(5), cs.State.Terminated.ExitCode)
					pod.Status.Phase = corev1.PodRunning
					if init {
						pod.Status.Phase = corev1.PodPending
					}
				}
				ran = append(ran, c.Name)
				if init {
					pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, cs)
				} else {
					pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, cs)
				}
				if failed {
					break
				}
			}
			require.Equal(t, nodepod.StageContainer, ran[0], "the binaries are staged before any step")

			// What UpdateMachine sees.
			st := nodepod.ReadStatus(pod)
			require.Equal(t, tc.wantPhase, st.Phase, "%+v", st)
			j, err := nodeexec.ReadJournal(filepath.Join(host, "journal", nodeexec.JournalFileName(plan.Name)))
			require.NoError(t, err, "the runner journals on the staging host path")
			if tc.wantFailed == "" {
				require.Equal(t, 1.0, st.Progress)
				require.Equal(t, nodeexec.PlanStateSucceeded, j.State)
				got, err := os.ReadFile(installed)
				require.NoError(t, err)
				want, err := os.ReadFile(filepath.Join(bundle, "kubernetes", "kubeadm"))
				require.NoError(t, err)
				require.Equal(t, want, got, "the bundle's binary, staged on the host, installed by the plan")
				return
			}
			require.Equal(t, nodeexec.PlanStateFailed, j.State)
			require.NotNil(t, st.Failed)
			require.Equal(t, tc.wantFailed, st.Failed.Name)
			require.Equal(t, tc.wantExit, st.Failed.ExitCode, "the step's own exit code, from the runner's summary, not the runner's 5")
			require.Equal(t, 0.5, st.Progress, "kubeadm-binary succeeded before verify failed")
		})
	}
}
