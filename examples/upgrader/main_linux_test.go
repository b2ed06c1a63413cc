//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// startUpgrader starts the test binary as the upgrader (see TestMain).
func startUpgrader(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = []string{envAsMain + "=1", "PATH=" + os.Getenv("PATH")}
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

// slowOncePlan has a step (or a rollback, with inRollback) that waits 30
// seconds the first time it runs: while a marker file exists.
func slowOncePlan(t *testing.T, inRollback bool) (planFile, journalDir, marker string, ledger func() string) {
	t.Helper()
	dir := t.TempDir()
	ledgerPath, marker := filepath.Join(dir, "ledger"), filepath.Join(dir, "slow-once")
	require.NoError(t, os.WriteFile(marker, nil, 0o600))
	appendLine := `echo "$2" >> "$1"`
	// The marker is removed before "started" is logged, so a signal sent
	// when that line appears always lands in the sleep. The shell leads
	// the step's process group; its ID goes to marker.pgid so that a test
	// that SIGKILLs the upgrader can clean up the orphaned step.
	slow := func(what string) []string {
		return nodeexec.ShellArgv(`slow=0; if [ -e "$3" ]; then rm -f "$3"; slow=1; echo "$$" > "$3.pgid"; fi; echo "$2 started" >> "$1"; if [ "$slow" = 1 ]; then sleep 30; fi; echo "$2 done" >> "$1"`,
			ledgerPath, what, marker)
	}
	steps := []nodeexec.Step{
		{Name: "one", Argv: nodeexec.ShellArgv(appendLine, ledgerPath, "one ran"), Rollback: nodeexec.ShellArgv(appendLine, ledgerPath, "one undone")},
		{Name: "two", Argv: nodeexec.ShellArgv(appendLine, ledgerPath, "two ran"), Rollback: nodeexec.ShellArgv(appendLine, ledgerPath, "two undone")},
		{Name: "three", Argv: nodeexec.ShellArgv(appendLine, ledgerPath, "three ran"), Rollback: nodeexec.ShellArgv(appendLine, ledgerPath, "three undone")},
	}
	if inRollback {
		steps[1].Rollback = slow("two undo")
	} else {
		steps[1].Argv, steps[1].Idempotent = slow("two"), true
	}
	data, err := nodeexec.EncodePlan(nodeexec.Plan{Name: "slow", Node: "node-a", Steps: steps})
	require.NoError(t, err)
	planFile = filepath.Join(dir, "plan.json")
	require.NoError(t, os.WriteFile(planFile, data, 0o600))
	return planFile, filepath.Join(dir, "journal"), marker, func() string { b, _ := os.ReadFile(ledgerPath); return string(b) }
}

func journalStates(t *testing.T, path string) (nodeexec.PlanState, []nodeexec.StepState) {
	t.Helper()
	j, err := nodeexec.ReadJournal(path)
	require.NoError(t, err)
	var s []nodeexec.StepState
	for _, r := range j.Steps {
		s = append(s, r.State)
	}
	return j.State, s
}

// TestSIGTERMIsRecordedAndResumed sends the signal the kubelet sends when
// the upgrader pod is deleted, to a step that takes longer than the stop
// grace: it is stopped once the grace is over, and resumed by the next run.
func TestSIGTERMIsRecordedAndResumed(t *testing.T) {
	plan, journal, _, ledger := slowOncePlan(t, false)
	cmd, out := startUpgrader(t, "run", "-plan", plan, "-direct", "-journal-dir", journal, "-stop-grace", "1s")
	require.Eventually(t, func() bool { return strings.Contains(ledger(), "two started") }, 20*time.Second, 5*time.Millisecond)
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	t.Logf("--- upgrader output ---\n%s", out)
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr)
	require.Equal(t, exitInProgress, exitErr.ExitCode())
	took := time.Since(start)
	require.GreaterOrEqual(t, took, time.Second, "the step had its grace")
	require.Less(t, took, 10*time.Second, "the step's sleep was stopped after the grace, not waited for")
	require.Contains(t, out.String(), "upgrader: interrupted")

	path := filepath.Join(journal, nodeexec.JournalFileName("slow"))
	state, steps := journalStates(t, path)
	require.Equal(t, nodeexec.PlanStateRunning, state)
	require.Equal(t, []nodeexec.StepState{nodeexec.StepStateSucceeded, nodeexec.StepStateRunning, nodeexec.StepStatePending}, steps)
	require.Equal(t, exitInProgress, upgrader(t, nil, "status", "-journal-dir", journal).code)

	r := upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal)
	require.Equal(t, exitOK, r.code)
	require.Equal(t, "one ran\ntwo started\ntwo started\ntwo done\nthree ran\n", ledger(),
		"one did not run again; the interrupted (idempotent) two ran again")
}

// TestSIGTERMLetsTheStepUnderWayFinish: a step that ends within the stop
// grace finishes, the next one does not start, and the next run goes on
// from there without running the finished step again.
func TestSIGTERMLetsTheStepUnderWayFinish(t *testing.T) {
	dir := t.TempDir()
	ledgerPath := filepath.Join(dir, "ledger")
	appendLine := `echo "$2" >> "$1"`
	data, err := nodeexec.EncodePlan(nodeexec.Plan{Name: "graceful", Node: "node-a", Steps: []nodeexec.Step{
		{Name: "one", Argv: nodeexec.ShellArgv(`echo "one started" >> "$1"; sleep 1; echo "one done" >> "$1"`, ledgerPath)},
		{Name: "two", Argv: nodeexec.ShellArgv(appendLine, ledgerPath, "two ran")},
	}})
	require.NoError(t, err)
	plan, journal := filepath.Join(dir, "plan.json"), filepath.Join(dir, "journal")
	require.NoError(t, os.WriteFile(plan, data, 0o600))
	ledger := func() string { b, _ := os.ReadFile(ledgerPath); return string(b) }

	cmd, out := startUpgrader(t, "run", "-plan", plan, "-direct", "-journal-dir", journal, "-stop-grace", "20s")
	require.Eventually(t, func() bool { return strings.Contains(ledger(), "one started") }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	t.Logf("--- upgrader output ---\n%s", out)
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr)
	require.Equal(t, exitInProgress, exitErr.ExitCode())
	require.Equal(t, "one started\none done\n", ledger(), "one finished; two did not start")
	state, steps := journalStates(t, filepath.Join(journal, nodeexec.JournalFileName("graceful")))
	require.Equal(t, nodeexec.PlanStateRunning, state)
	require.Equal(t, []nodeexec.StepState{nodeexec.StepStateSucceeded, nodeexec.StepStatePending}, steps)

	require.Equal(t, exitOK, upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal).code)
	require.Equal(t, "one started\none done\ntwo ran\n", ledger())
}

// TestRollbackResumesAfterSIGKILL kills the upgrader in the middle of a
// requested rollback: the next rollback finishes it without undoing a
// step twice.
func TestRollbackResumesAfterSIGKILL(t *testing.T) {
	plan, journal, marker, ledger := slowOncePlan(t, true)
	require.NoError(t, os.Remove(marker))
	require.Equal(t, exitOK, upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal).code)
	require.NoError(t, os.WriteFile(marker, nil, 0o600))

	cmd, out := startUpgrader(t, "rollback", "-plan", plan, "-direct", "-journal-dir", journal)
	require.Eventually(t, func() bool { return strings.Contains(ledger(), "two undo started") }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.ErrorContains(t, cmd.Wait(), "signal: killed")
	t.Logf("--- killed upgrader output ---\n%s", out)
	// Nothing kills a step whose runner was SIGKILLed (in a pod, the
	// container's cgroup dies with it); do it here, before it logs "done".
	b, err := os.ReadFile(marker + ".pgid")
	require.NoError(t, err)
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(-pgid, syscall.SIGKILL))

	path := filepath.Join(journal, nodeexec.JournalFileName("slow"))
	state, steps := journalStates(t, path)
	require.Equal(t, nodeexec.PlanStateRollingBack, state)
	require.Equal(t, []nodeexec.StepState{nodeexec.StepStateSucceeded, nodeexec.StepStateRollingBack, nodeexec.StepStateRolledBack}, steps)
	require.Equal(t, exitInProgress, upgrader(t, nil, "status", "-journal-dir", journal, "slow").code)

	r := upgrader(t, nil, "rollback", "-plan", plan, "-direct", "-journal-dir", journal)
	require.Equal(t, exitOK, r.code)
	require.Equal(t, "one ran\ntwo ran\nthree ran\nthree undone\ntwo undo started\ntwo undo started\ntwo undo done\none undone\n", ledger(),
		"three was not undone twice; the interrupted rollback of two ran again")
	state, _ = journalStates(t, path)
	require.Equal(t, nodeexec.PlanStateRolledBack, state)
}

// namespacedChild starts `sleep` in fresh UTS, mount, IPC and network
// namespaces with its own hostname and a marker file that exists only in
// its mount namespace: a stand-in for the host, seen from a pod.
func namespacedChild(t *testing.T) (pid int, hostname, markerDir string) {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "this test enters namespaces and must run as root")
	hostname = fmt.Sprintf("host-%d", time.Now().UnixNano()%1_000_000)
	markerDir = t.TempDir()
	script := `hostname "$1" && mount -t tmpfs upgrader-test "$2" && echo "$1" > "$2/marker" && exec sleep 600`
	cmd := exec.Command("/usr/bin/unshare", "--uts", "--mount", "--ipc", "--net", "--fork", "--kill-child",
		"--propagation", "private", "/bin/sh", "-c", script, "sh", hostname, markerDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	children := fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(children)
		f := strings.Fields(string(b))
		if err != nil || len(f) != 1 {
			return false
		}
		pid, _ = strconv.Atoi(f[0])
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return err == nil && strings.TrimSpace(string(comm)) == "sleep"
	}, 10*time.Second, 10*time.Millisecond)
	return pid, hostname, markerDir
}

// TestNsenterLikeThePod runs without -direct, configured only by the
// environment the pod sets, so every step goes through the real nsenter
// into the target's namespaces.
func TestNsenterLikeThePod(t *testing.T) {
	pid, childHost, markerDir := namespacedChild(t)
	ourHost, err := os.Hostname()
	require.NoError(t, err)
	require.NotEqual(t, ourHost, childHost)

	marker := filepath.Join(markerDir, "marker")
	plan := nodeexec.Plan{Name: "ns", Node: "node-a", Steps: []nodeexec.Step{
		{Name: "hostname", Argv: []string{"hostname"}, Idempotent: true, Rollback: []string{"hostname"}},
		{Name: "host-file", Argv: []string{"cat", marker}, Idempotent: true, NothingToUndo: true},
	}}
	data, err := nodeexec.EncodePlan(plan)
	require.NoError(t, err)
	dir := t.TempDir()
	env := map[string]string{
		nodeexec.EnvPlan:       string(data),
		nodeexec.EnvJournalDir: dir,
		nodeexec.EnvTargetPID:  strconv.Itoa(pid),
		nodeexec.EnvNsenter:    "/usr/bin/nsenter",
	}
	r := upgrader(t, env, "run")
	require.Equal(t, exitOK, r.code)
	require.Equal(t, childHost+"\n"+childHost+"\n", r.stderr, "both steps ran in the target's namespaces (live output on stderr)")
	j, err := nodeexec.ReadJournal(filepath.Join(dir, nodeexec.JournalFileName("ns")))
	require.NoError(t, err)
	require.Equal(t, childHost+"\n", j.Steps[0].Output)
	require.Equal(t, childHost+"\n", j.Steps[1].Output, "the file exists only in the target's mount namespace")

	r = upgrader(t, env, "rollback")
	require.Equal(t, exitOK, r.code)
	require.Equal(t, childHost+"\n", r.stderr, "the rollback argv ran through nsenter too")

	// -direct stays in our own namespaces.
	require.Equal(t, exitOK, upgrader(t, env, "reset", "ns").code)
	r = upgrader(t, env, "run", "-direct")
	require.Equal(t, exitFailed, r.code, "the marker does not exist outside the target's mount namespace")
	require.True(t, strings.HasPrefix(r.stderr, ourHost+"\n"))
}
