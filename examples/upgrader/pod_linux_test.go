//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// TestPodContainersRunTheBinary runs every runner container of the pod
// nodepod builds, in order, the way the kubelet would: the container's
// command after "/upgrader" as arguments and exactly its environment, with
// one substitution (the summary goes to a temporary file instead of
// /dev/termination-log). The pod targets this test's own PID, so the real
// nsenter enters namespaces without touching the machine's PID 1.
func TestPodContainersRunTheBinary(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test enters namespaces and must run as root")
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	step := func(name string) nodeexec.Step {
		return nodeexec.Step{Name: name, Argv: nodeexec.ShellArgv(`echo "$2" >> "$1"`, ledger, name)}
	}
	plan := nodeexec.Plan{Name: "pod-test", Node: "node-a", Steps: []nodeexec.Step{step("one"), step("two"), step("three")}}
	pod, err := nodepod.Build(plan,
		nodepod.WithImage("upgrader:test"),
		nodepod.WithRunnerCommand("/upgrader", "run"),
		nodepod.WithStagingHostPath(filepath.Join(dir, "host")),
		nodepod.WithTargetPID(os.Getpid()),
		nodepod.WithNsenterPath("/usr/bin/nsenter"),
	)
	require.NoError(t, err)

	summary := filepath.Join(dir, "termination-log")
	var ran []string
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		require.Equal(t, "/upgrader", c.Command[0])
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		require.Equal(t, corev1.TerminationMessagePathDefault, env[nodeexec.EnvSummaryFile])
		env[nodeexec.EnvSummaryFile] = summary
		r := upgrader(t, env, c.Command[1:]...)
		require.Equal(t, exitOK, r.code, "container %s", c.Name)
		ran = append(ran, c.Name)

		raw, err := os.ReadFile(summary)
		require.NoError(t, err)
		sum, err := nodeexec.ParseSummary(raw)
		require.NoError(t, err)
		if c.Name == nodepod.StatusContainer {
			require.Contains(t, r.stdout, "nothing to do: the journal says the plan is already Succeeded")
		} else {
			rec := sum.Steps[len(ran)-1]
			require.Equal(t, c.Name, rec.Name)
			require.Equal(t, nodeexec.StepStateSucceeded, rec.State, "container %s ran its step", c.Name)
		}
	}
	require.Equal(t, []string{"one", "two", "three", nodepod.StatusContainer}, ran)
	got, err := os.ReadFile(ledger)
	require.NoError(t, err)
	require.Equal(t, "one\ntwo\nthree\n", string(got), "each step ran once, in its own container")

	j, err := nodeexec.ReadJournal(filepath.Join(dir, "host", "journal", nodeexec.JournalFileName(plan.Name)))
	require.NoError(t, err)
	require.Equal(t, nodeexec.PlanStateSucceeded, j.State)
	require.Equal(t, 3, j.Runs, "one run per step container; the last one finished the plan, so the status container ran nothing")
	require.Equal(t, strconv.Itoa(os.Getpid()), envOf(pod.Spec.Containers[0], nodeexec.EnvTargetPID))
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
