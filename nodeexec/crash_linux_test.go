//go:build linux

package nodeexec

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
)

// envCrashHelper makes the test binary act as the upgrader: it reads the
// plan from the environment exactly as the single-container pod does
// (FromEnv) and runs it.
const envCrashHelper = "UPGRADEKIT_TEST_RUNNER_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(envCrashHelper) == "1" {
		os.Exit(runnerHelper())
	}
	os.Exit(m.Run())
}

func runnerHelper() int {
	cfg, err := FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := funcr.New(func(prefix, args string) { fmt.Println(prefix, args) }, funcr.Options{})
	opts := cfg.RunnerOptions()
	opts.Direct, opts.Logger = true, log
	r, err := NewRunner(cfg.Executor(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out, err := r.Run(context.Background(), cfg.Plan)
	fmt.Printf("helper: plan %s state %s err %v\n", out.Plan, out.State, err)
	if err != nil {
		return 1
	}
	return 0
}

// crashPlan appends to a ledger file every time a step's command really
// executes, so the ledger is independent evidence of what ran.
func crashPlan(ledger, slowMarker string) Plan {
	appendLine := `echo "$2" >> "$1"`
	return Plan{Name: "crash-resume", Node: "node-a", Steps: []Step{
		// Not idempotent, no check: re-running it would be a bug.
		{Name: "step-1", Argv: ShellArgv(appendLine, ledger, "step-1 ran")},
		// Interrupted by SIGKILL mid-run the first time (it waits while
		// the slow marker exists); its check tells the resumed runner it
		// did not finish.
		{
			Name: "step-2",
			// The marker is removed before "started" is logged, so the
			// kill (which waits for that line) always lands in the sleep.
			Argv:  ShellArgv(`slow=0; if [ -e "$2" ]; then rm -f "$2"; slow=1; fi; echo "step-2 started" >> "$1"; if [ "$slow" = 1 ]; then sleep 30; fi; echo "step-2 done" >> "$1"`, ledger, slowMarker),
			Check: ShellArgv(`grep -qx "step-2 done" "$1"`, ledger),
		},
		{Name: "step-3", Argv: ShellArgv(appendLine, ledger, "step-3 ran")},
	}}
}

func TestCrashResumeWithSIGKILL(t *testing.T) {
	dir := t.TempDir()
	journalDir := filepath.Join(dir, "journal")
	ledger := filepath.Join(dir, "ledger")
	slow := filepath.Join(dir, "slow-once")
	summaryFile := filepath.Join(dir, "termination-log") // what the pod's /dev/termination-log would hold
	require.NoError(t, os.WriteFile(slow, nil, 0o600))
	plan := crashPlan(ledger, slow)
	encoded, err := EncodePlan(plan)
	require.NoError(t, err)

	runner := func() (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = []string{envCrashHelper + "=1", EnvPlan + "=" + string(encoded), EnvJournalDir + "=" + journalDir, EnvSummaryFile + "=" + summaryFile, "PATH=" + os.Getenv("PATH")}
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.WaitDelay = 5 * time.Second
		return cmd, out
	}
	readLedger := func() string { b, _ := os.ReadFile(ledger); return string(b) }

	// Run 1: kill -9 the runner while step-2 is running.
	first, out1 := runner()
	require.NoError(t, first.Start())
	require.Eventually(t, func() bool { return strings.Contains(readLedger(), "step-2 started") }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	waitErr := first.Wait()
	require.ErrorContains(t, waitErr, "signal: killed")
	t.Logf("run 1 (pid %d) killed with SIGKILL: %v\n--- run 1 output ---\n%s", first.Process.Pid, waitErr, out1)

	path := filepath.Join(journalDir, JournalFileName(plan.Name))
	j, err := ReadJournal(path)
	require.NoError(t, err)
	require.Equal(t, PlanStateRunning, j.State)
	require.Equal(t, []StepState{StepStateSucceeded, StepStateRunning, StepStatePending}, states(j.Outcome))
	t.Logf("journal after the crash:\n%s", journalSummary(j))
	t.Logf("ledger after the crash:\n%s", readLedger())
	raw, err := os.ReadFile(summaryFile)
	require.NoError(t, err)
	sum, err := ParseSummary(raw)
	require.NoError(t, err)
	require.Equal(t, StepStateRunning, sum.Steps[1].State, "the killed runner's last summary shows where it was")
	t.Logf("termination message left by the killed runner: %s", raw)

	// Run 2: a fresh process resumes from the journal.
	second, out2 := runner()
	require.NoError(t, second.Run(), "run 2 output:\n%s", out2)
	t.Logf("--- run 2 output ---\n%s", out2)

	j, err = ReadJournal(path)
	require.NoError(t, err)
	t.Logf("journal after the resume:\n%s", journalSummary(j))
	require.Equal(t, PlanStateSucceeded, j.State)
	require.Equal(t, 2, j.Runs)
	s1, _ := j.Step("step-1")
	s2, _ := j.Step("step-2")
	s3, _ := j.Step("step-3")
	require.Equal(t, 1, s1.Attempts, "step-1 ran once, in run 1")
	require.Equal(t, 2, s2.Attempts, "step-2 started in run 1 and ran again in run 2")
	require.Equal(t, 1, s2.Resumed)
	require.Equal(t, 1, s3.Attempts)
	require.NotContains(t, out2.String(), `"duration"="30`, "the resumed run did not wait for the slow path again")

	got := readLedger()
	t.Logf("ledger after the resume (one line per real execution):\n%s", got)
	require.Equal(t, "step-1 ran\nstep-2 started\nstep-2 started\nstep-2 done\nstep-3 ran\n", got,
		"step-1 did not re-run; the interrupted step-2 was checked and re-run; step-3 ran once")
	require.Contains(t, out2.String(), `"step"="step-1" "state"="Succeeded"`, "run 2 logged that it skipped the completed step")

	// Run 3: the plan is finished; nothing runs.
	third, out3 := runner()
	require.NoError(t, third.Run())
	require.Equal(t, got, readLedger())
	require.Contains(t, out3.String(), "plan already finished")
}

func journalSummary(j Journal) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  plan=%s state=%s runs=%d\n", j.Plan, j.State, j.Runs)
	for _, s := range j.Steps {
		fmt.Fprintf(&b, "  %-7s %-10s attempts=%d resumed=%d note=%q\n", s.Name, s.State, s.Attempts, s.Resumed, s.Note)
	}
	return b.String()
}
