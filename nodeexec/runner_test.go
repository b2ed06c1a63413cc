package nodeexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// scriptedHost is an in-memory host: every command is recorded as
// "step/phase" and answers with scripted exit codes (default 0).
type scriptedHost struct {
	mu    sync.Mutex
	calls []string
	exits map[string][]int
	// block, when it names a "step/phase", makes that command wait for its
	// context (to simulate a crash or deadline mid-step).
	block string
	cmds  []Command
}

func (h *scriptedHost) Run(ctx context.Context, c Command) (Result, error) {
	key := c.Step + "/" + string(c.Phase)
	h.mu.Lock()
	h.calls = append(h.calls, key)
	h.cmds = append(h.cmds, c)
	code := 0
	if seq := h.exits[key]; len(seq) > 0 {
		code = seq[0]
		if len(seq) > 1 {
			h.exits[key] = seq[1:]
		}
	}
	block := h.block == key
	h.mu.Unlock()
	if block {
		<-ctx.Done()
		return Result{ExitCode: -1}, ctx.Err()
	}
	return Result{ExitCode: code, Output: []byte(key + " output")}, nil
}

func (h *scriptedHost) Calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

func (h *scriptedHost) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls, h.cmds = nil, nil
}

// newTestRunner returns a runner journaling in dir and logging to t, with
// the other settings of opts (at most one).
func newTestRunner(t *testing.T, h Executor, dir string, opts ...RunnerOptions) *Runner {
	t.Helper()
	var o RunnerOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	o.JournalDir, o.Logger = dir, testr.New(t)
	r, err := NewRunner(h, o)
	require.NoError(t, err)
	return r
}

func threeStepPlan() Plan {
	return Plan{
		Name: "p", Node: "n1",
		Steps: []Step{
			{Name: "one", Argv: []string{"one"}, Backup: []string{"b1"}, Rollback: []string{"r1"}, Idempotent: true},
			{Name: "two", Argv: []string{"two"}, Rollback: []string{"r2"}, Idempotent: true},
			{Name: "three", Argv: []string{"three"}, Backup: []string{"b3"}, Rollback: []string{"r3"}, Idempotent: true},
		},
	}
}

func states(o Outcome) []StepState {
	var s []StepState
	for _, r := range o.Steps {
		s = append(s, r.State)
	}
	return s
}

func TestRunSucceedsAndIsNotRepeated(t *testing.T) {
	h := &scriptedHost{}
	dir := t.TempDir()
	r := newTestRunner(t, h, dir)
	out, err := r.Run(t.Context(), threeStepPlan())
	require.NoError(t, err)
	require.Equal(t, PlanStateSucceeded, out.State)
	require.Equal(t, []string{"one/backup", "one/run", "two/run", "three/backup", "three/run"}, h.Calls())
	require.Equal(t, 1.0, out.Progress())
	// Default target is PID 1 with the default namespaces.
	require.Equal(t, &Target{PID: 1, Namespaces: DefaultNamespaces()}, h.cmds[1].Target)

	// The journal on disk is what Run returned.
	j, err := ReadJournal(journalPath(t, r, "p"))
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(out, j.Outcome))
	info, err := os.Stat(journalPath(t, r, "p"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	// Running a finished plan runs nothing.
	h.reset()
	out2, err := r.Run(t.Context(), threeStepPlan())
	require.NoError(t, err)
	require.Empty(t, h.Calls())
	require.Equal(t, PlanStateSucceeded, out2.State)

	// Reset makes it run again.
	require.NoError(t, r.Reset("p"))
	require.NoError(t, r.Reset("p"), "resetting twice is fine")
	_, err = r.Run(t.Context(), threeStepPlan())
	require.NoError(t, err)
	require.Len(t, h.Calls(), 5)
}

func TestCheckSkipsDoneStep(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"two/check": {0}}}
	p := threeStepPlan()
	p.Steps[1].Check = []string{"is-done"}
	out, err := newTestRunner(t, h, t.TempDir()).Run(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, []StepState{StepStateSucceeded, StepStateSkipped, StepStateSucceeded}, states(out))
	require.NotContains(t, h.Calls(), "two/run")
}

func TestRetryThenSucceed(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"two/run": {1, 7, 0}}}
	p := threeStepPlan()
	p.Steps[1].Retry = RetryPolicy{Attempts: 3, Backoff: time.Millisecond}
	out, err := newTestRunner(t, h, t.TempDir()).Run(t.Context(), p)
	require.NoError(t, err)
	rec, _ := out.Step("two")
	require.Equal(t, 3, rec.Attempts)
	require.Equal(t, StepStateSucceeded, rec.State)
}

func TestFailureIsTerminalWithExitCodeAndOutput(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"two/run": {3}}}
	p := threeStepPlan()
	p.Steps[1].Retry = RetryPolicy{Attempts: 2}
	r := newTestRunner(t, h, t.TempDir())
	out, err := r.Run(t.Context(), p)
	require.ErrorIs(t, err, ErrStepFailed)
	var pe *PlanError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, Failure{Step: "two", Phase: PhaseRun, ExitCode: 3, Output: "two/run output", Attempts: 2}, pe.Failure)
	require.Equal(t, PlanStateFailed, out.State)
	require.Equal(t, []StepState{StepStateSucceeded, StepStateFailed, StepStatePending}, states(out))
	require.InDelta(t, 1.0/3, out.Progress(), 1e-9)

	// Terminal: a second Run runs nothing and returns the same failure.
	h.reset()
	_, err = r.Run(t.Context(), p)
	require.ErrorIs(t, err, ErrStepFailed)
	require.Empty(t, h.Calls())
}

func TestRollbackInReverseOrder(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"three/run": {1}}}
	p := threeStepPlan()
	p.RollbackOnFailure = true
	out, err := newTestRunner(t, h, t.TempDir()).Run(t.Context(), p)
	require.ErrorIs(t, err, ErrRolledBack)
	require.Equal(t, PlanStateRolledBack, out.State)
	require.Equal(t, []string{
		"one/backup", "one/run", "two/run", "three/backup", "three/run",
		"three/rollback", "two/rollback", "one/rollback",
	}, h.Calls())
	require.Equal(t, []StepState{StepStateRolledBack, StepStateRolledBack, StepStateRolledBack}, states(out))
	require.Equal(t, "three", out.Failure.Step)
}

func TestBackupFailureSkipsRestoreOfThatStep(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"three/backup": {2}}}
	p := threeStepPlan()
	p.RollbackOnFailure = true
	out, err := newTestRunner(t, h, t.TempDir()).Run(t.Context(), p)
	require.ErrorIs(t, err, ErrRolledBack)
	require.NotContains(t, h.Calls(), "three/run")
	require.NotContains(t, h.Calls(), "three/rollback", "no backup was taken, nothing to restore")
	require.Equal(t, PhaseBackup, out.Failure.Phase)
	require.Equal(t, 2, out.Failure.ExitCode)
}

func TestRollbackFailureNeedsAttention(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"three/run": {1}, "two/rollback": {9}}}
	p := threeStepPlan()
	p.RollbackOnFailure = true
	out, err := newTestRunner(t, h, t.TempDir()).Run(t.Context(), p)
	require.ErrorIs(t, err, ErrNeedsAttention)
	require.Equal(t, PlanStateNeedsAttention, out.State)
	require.Equal(t, PhaseRollback, out.Failure.Phase)
	require.Equal(t, "two", out.Failure.Step)
	require.Contains(t, out.Failure.Error, `after step "three" failed`)
	require.NotContains(t, h.Calls(), "one/rollback", "rollback stops at the first failure")
}

// interruptAt runs p until step/phase blocks, then cancels the context,
// leaving the journal as a crash would.
func interruptAt(t *testing.T, r *Runner, h *scriptedHost, p Plan, at string) {
	t.Helper()
	h.block = at
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := r.Run(ctx, p); done <- err }()
	require.Eventually(t, func() bool {
		c := h.Calls()
		return len(c) > 0 && c[len(c)-1] == at
	}, 5*time.Second, time.Millisecond)
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	h.block = ""
	h.reset()
}

func TestResumeAfterInterruption(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*Step)
		exits     map[string][]int
		wantCalls []string
		wantState PlanState
		wantErr   error
	}{
		{
			name:      "idempotent step re-runs",
			mutate:    func(s *Step) { s.Idempotent = true },
			wantCalls: []string{"two/run", "three/backup", "three/run"},
			wantState: PlanStateSucceeded,
		},
		{
			name:      "check passes: marked done, not re-run",
			mutate:    func(s *Step) { s.Idempotent = false; s.Check = []string{"c"} },
			exits:     map[string][]int{"two/check": {1, 0}},
			wantCalls: []string{"two/check", "three/backup", "three/run"},
			wantState: PlanStateSucceeded,
		},
		{
			name:      "check fails: re-run",
			mutate:    func(s *Step) { s.Idempotent = false; s.Check = []string{"c"} },
			exits:     map[string][]int{"two/check": {1}},
			wantCalls: []string{"two/check", "two/run", "three/backup", "three/run"},
			wantState: PlanStateSucceeded,
		},
		{
			name:      "rollback then re-run",
			mutate:    func(s *Step) { s.Idempotent = false; s.OnInterrupt = InterruptPolicyRollback },
			wantCalls: []string{"two/rollback", "two/run", "three/backup", "three/run"},
			wantState: PlanStateSucceeded,
		},
		{
			name:      "not idempotent: stop, run nothing",
			mutate:    func(s *Step) { s.Idempotent = false },
			wantCalls: nil,
			wantState: PlanStateNeedsAttention,
			wantErr:   ErrNeedsAttention,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &scriptedHost{exits: tt.exits}
			if h.exits == nil {
				h.exits = map[string][]int{}
			}
			p := threeStepPlan()
			tt.mutate(&p.Steps[1])
			r := newTestRunner(t, h, t.TempDir())
			interruptAt(t, r, h, p, "two/run")

			j, err := ReadJournal(journalPath(t, r, p.Name))
			require.NoError(t, err)
			require.Equal(t, []StepState{StepStateSucceeded, StepStateRunning, StepStatePending}, states(j.Outcome))

			out, err := r.Run(t.Context(), p)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.wantState, out.State)
			require.Equal(t, tt.wantCalls, h.Calls())
			require.NotContains(t, h.Calls(), "one/run", "a completed step never re-runs")
			require.NotContains(t, h.Calls(), "one/backup")
			rec, _ := out.Step("two")
			require.Equal(t, 1, rec.Resumed)
			require.Equal(t, 2, out.Runs)
		})
	}
}

func TestBackupNotRetakenOnResume(t *testing.T) {
	h := &scriptedHost{}
	p := threeStepPlan()
	r := newTestRunner(t, h, t.TempDir())
	interruptAt(t, r, h, p, "three/run")
	_, err := r.Run(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, []string{"three/run"}, h.Calls(), "the backup of the interrupted step is kept, not overwritten")
}

func TestResumeLimit(t *testing.T) {
	h := &scriptedHost{}
	p := threeStepPlan()
	r := newTestRunner(t, h, t.TempDir(), RunnerOptions{MaxResumes: 1})
	interruptAt(t, r, h, p, "two/run")
	interruptAt(t, r, h, p, "two/run")
	out, err := r.Run(t.Context(), p)
	require.ErrorIs(t, err, ErrNeedsAttention)
	require.Contains(t, out.Failure.Error, "interrupted 2 times")
	require.Empty(t, h.Calls())
}

func TestResumeInterruptedRollback(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"three/run": {1}}}
	p := threeStepPlan()
	p.RollbackOnFailure = true
	r := newTestRunner(t, h, t.TempDir())
	interruptAt(t, r, h, p, "two/rollback")
	out, err := r.Run(t.Context(), p)
	require.ErrorIs(t, err, ErrRolledBack)
	require.Equal(t, []string{"two/rollback", "one/rollback"}, h.Calls(), "three is already rolled back; two is redone")
	require.Equal(t, PlanStateRolledBack, out.State)
}

func TestStepDeadline(t *testing.T) {
	p := Plan{Name: "p", Node: "n", Steps: []Step{{
		Name: "slow", Argv: []string{"sleep", "30"}, Timeout: 100 * time.Millisecond,
		Retry: RetryPolicy{Attempts: 2},
	}}}
	start := time.Now()
	out, err := newTestRunner(t, OSExecutor{}, t.TempDir(), RunnerOptions{Direct: true}).Run(t.Context(), p)
	require.ErrorIs(t, err, ErrStepFailed)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Equal(t, -1, out.Failure.ExitCode)
	require.Equal(t, 2, out.Failure.Attempts)
	require.Contains(t, out.Failure.Error, "deadline of 100ms exceeded")
}

func TestBadJournalsRunNothingAndLoseNothing(t *testing.T) {
	other := threeStepPlan()
	other.Steps[2].Argv = []string{"changed"}
	otherJournal, err := json.Marshal(newJournal(other, other.Fingerprint()))
	require.NoError(t, err)
	// withStates is a journal of the plan under test whose step states
	// contradict each other or the plan state.
	withStates := func(plan PlanState, steps ...StepState) []byte {
		p := threeStepPlan()
		j := newJournal(p, p.Fingerprint())
		j.State = plan
		for i, st := range steps {
			j.Steps[i].State = st
		}
		b, err := json.Marshal(j)
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name    string
		content []byte
		want    error
	}{
		{"garbage", []byte("{not json"), ErrJournalCorrupt},
		{"truncated", []byte(`{"version":1,"fingerprint":"ab`), ErrJournalCorrupt},
		{"unknown version", []byte(`{"version":99,"fingerprint":"x","plan":"p","state":"Running","steps":[]}`), ErrJournalCorrupt},
		{"unknown state", []byte(`{"version":1,"fingerprint":"x","plan":"p","state":"Dancing","steps":[]}`), ErrJournalCorrupt},
		{"different plan", otherJournal, ErrJournalMismatch},
		{"running plan, rolled-back step after a pending one", withStates(PlanStateRunning, StepStateSucceeded, StepStatePending, StepStateRolledBack), ErrJournalCorrupt},
		{"running plan, failed step", withStates(PlanStateRunning, StepStateSucceeded, StepStateFailed, StepStatePending), ErrJournalCorrupt},
		{"running plan, two running steps", withStates(PlanStateRunning, StepStateRunning, StepStateRunning, StepStatePending), ErrJournalCorrupt},
		{"running plan, succeeded after pending", withStates(PlanStateRunning, StepStatePending, StepStateSucceeded, StepStatePending), ErrJournalCorrupt},
		{"running plan, succeeded after running", withStates(PlanStateRunning, StepStateRunning, StepStatePending, StepStateSucceeded), ErrJournalCorrupt},
		{"rolling back, running step", withStates(PlanStateRollingBack, StepStateSucceeded, StepStateRunning, StepStatePending), ErrJournalCorrupt},
		{"rolling back, two failed steps", withStates(PlanStateRollingBack, StepStateFailed, StepStateFailed, StepStatePending), ErrJournalCorrupt},
		{"rolling back, rolled back below the rolling-back step", withStates(PlanStateRollingBack, StepStateRolledBack, StepStateRollingBack, StepStateFailed), ErrJournalCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &scriptedHost{}
			dir := t.TempDir()
			r := newTestRunner(t, h, dir)
			path := journalPath(t, r, "p")
			require.NoError(t, os.WriteFile(path, tt.content, 0o600))
			_, err := r.Run(t.Context(), threeStepPlan())
			require.ErrorIs(t, err, tt.want)
			var je *JournalError
			require.ErrorAs(t, err, &je)
			require.Equal(t, path, je.Path)
			require.Empty(t, h.Calls(), "nothing runs")
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, tt.content, after, "nothing is lost")
		})
	}
}

func TestInvalidPlanRunsNothing(t *testing.T) {
	h := &scriptedHost{}
	dir := t.TempDir()
	p := threeStepPlan()
	p.Steps[1].Namespaces = []Namespace{"time"}
	_, err := newTestRunner(t, h, dir).Run(t.Context(), p)
	require.ErrorIs(t, err, errUnknownNamespace)
	require.Empty(t, h.Calls())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no journal is written for an invalid plan")
}

func TestJournalLock(t *testing.T) {
	h := &scriptedHost{}
	dir := t.TempDir()
	r := newTestRunner(t, h, dir)
	unlock, err := lockFile(journalPath(t, r, "p") + ".lock")
	require.NoError(t, err)
	_, err = r.Run(t.Context(), threeStepPlan())
	require.ErrorIs(t, err, ErrJournalLocked)
	unlock()
	_, err = r.Run(t.Context(), threeStepPlan())
	require.NoError(t, err)
}

func TestDirectAndInContainerHaveNoTarget(t *testing.T) {
	h := &scriptedHost{}
	p := threeStepPlan()
	p.Steps[0].InContainer = true
	p.Steps[1].Namespaces = []Namespace{NamespaceUTS}
	p.Steps[1].Env = []EnvVar{{Name: "K", Value: "v w"}}
	_, err := newTestRunner(t, h, t.TempDir(), RunnerOptions{TargetPID: 77}).Run(t.Context(), p)
	require.NoError(t, err)
	require.Nil(t, h.cmds[0].Target)
	require.Equal(t, &Target{PID: 77, Namespaces: []Namespace{NamespaceUTS}}, h.cmds[2].Target)
	require.Equal(t, []string{"K=v w"}, h.cmds[2].Env)

	h2 := &scriptedHost{}
	_, err = newTestRunner(t, h2, t.TempDir(), RunnerOptions{Direct: true}).Run(t.Context(), threeStepPlan())
	require.NoError(t, err)
	for _, c := range h2.cmds {
		require.Nil(t, c.Target)
	}
}

func TestNewRunnerRejectsBadOptions(t *testing.T) {
	_, err := NewRunner(nil, RunnerOptions{})
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "Executor")
	for field, o := range map[string]RunnerOptions{
		"TargetPID":          {TargetPID: -1},
		"JournalOutputLimit": {JournalOutputLimit: -1},
		"MaxResumes":         {MaxResumes: -1},
	} {
		_, err = NewRunner(OSExecutor{}, o)
		require.ErrorIs(t, err, ErrInvalidOption, field)
		require.ErrorContains(t, err, "RunnerOptions."+field)
	}
}

func TestRunnerOptionsZeroValueIsTheDefault(t *testing.T) {
	r, err := NewRunner(OSExecutor{}, RunnerOptions{})
	require.NoError(t, err)
	require.Equal(t, DefaultJournalDir, r.store.(FileJournalStore).Dir)
	require.Equal(t, 1, r.pid)
	require.Equal(t, defaultJournalOutputLimit, r.outputLimit)
	require.Equal(t, defaultMaxResumes, r.maxResumes)
	require.NotNil(t, r.clock)
	require.False(t, r.direct)
}

func TestProgressCallback(t *testing.T) {
	var seen []float64
	_, err := newTestRunner(t, &scriptedHost{}, t.TempDir(), RunnerOptions{Progress: func(o Outcome) { seen = append(seen, o.Progress()) }}).Run(t.Context(), threeStepPlan())
	require.NoError(t, err)
	require.Equal(t, 1.0, seen[len(seen)-1])
	require.Equal(t, 0.0, seen[0])
}

func TestJournalWriteIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.journal.json")
	j := newJournal(threeStepPlan(), "fp")
	require.NoError(t, writeJournal(path, j))
	j.State = PlanStateSucceeded
	require.NoError(t, writeJournal(path, j))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files are left behind")
	got, err := ReadJournal(path)
	require.NoError(t, err)
	require.Equal(t, PlanStateSucceeded, got.State)

	_, err = ReadJournal(filepath.Join(dir, "missing"))
	require.True(t, errors.Is(err, os.ErrNotExist))
}

func TestStopAfter(t *testing.T) {
	h := &scriptedHost{}
	dir := t.TempDir()
	p := threeStepPlan()
	out, err := newTestRunner(t, h, dir, RunnerOptions{StopAfter: "two"}).Run(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, PlanStateRunning, out.State)
	require.Equal(t, []StepState{StepStateSucceeded, StepStateSucceeded, StepStatePending}, states(out))
	h.reset()
	// The next container runs only what is left.
	out, err = newTestRunner(t, h, dir, RunnerOptions{StopAfter: "three"}).Run(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, PlanStateSucceeded, out.State)
	require.Equal(t, []string{"three/backup", "three/run"}, h.Calls())

	_, err = newTestRunner(t, h, t.TempDir(), RunnerOptions{StopAfter: "nope"}).Run(t.Context(), p)
	require.ErrorIs(t, err, errInvalidName)
}

func TestCancelledContextJournalsNoAttempt(t *testing.T) {
	t.Run("cancelled before Run", func(t *testing.T) {
		h := &scriptedHost{}
		p := threeStepPlan()
		p.Steps[0].Idempotent = false // a phantom attempt would stop the next run
		r := newTestRunner(t, h, t.TempDir())
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := r.Run(ctx, p)
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, h.Calls())
		out, err := r.Run(t.Context(), p)
		require.NoError(t, err)
		rec, _ := out.Step("one")
		require.Equal(t, 1, rec.Attempts)
		require.Zero(t, rec.Resumed)
	})
	t.Run("cancelled between backup and first attempt", func(t *testing.T) {
		h := &scriptedHost{}
		p := threeStepPlan()
		p.Steps[0].Idempotent = false
		ctx, cancel := context.WithCancel(t.Context())
		// The journal write that records the backup is the last thing
		// before the first attempt; cancel right there.
		r := newTestRunner(t, h, t.TempDir(), RunnerOptions{Progress: func(o Outcome) {
			if rec, _ := o.Step("one"); rec.BackupTaken && rec.State == StepStatePending {
				cancel()
			}
		}})
		_, err := r.Run(ctx, p)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, []string{"one/backup"}, h.Calls())
		j, err := ReadJournal(journalPath(t, r, p.Name))
		require.NoError(t, err)
		require.Equal(t, StepRecord{Name: "one", State: StepStatePending, BackupTaken: true}, j.Steps[0])

		h.reset()
		r2 := newTestRunner(t, h, r.store.(FileJournalStore).Dir)
		out, err := r2.Run(t.Context(), p)
		require.NoError(t, err, "the step never started, so it is not interrupted")
		require.Equal(t, []string{"one/run", "two/run", "three/backup", "three/run"}, h.Calls())
		require.Equal(t, PlanStateSucceeded, out.State)
	})
}

func TestResumeCountedBeforeCheckRuns(t *testing.T) {
	// A check that kills its runner (here: blocks until cancelled) must
	// still use up a resume, or the plan loops forever.
	h := &scriptedHost{}
	p := threeStepPlan()
	p.Steps[1].Idempotent = false
	p.Steps[1].Check = []string{"c"}
	h.exits = map[string][]int{"two/check": {1, 0}}
	r := newTestRunner(t, h, t.TempDir(), RunnerOptions{MaxResumes: 1})
	interruptAt(t, r, h, p, "two/run")
	interruptAt(t, r, h, p, "two/check")
	j, err := ReadJournal(journalPath(t, r, p.Name))
	require.NoError(t, err)
	require.Equal(t, 1, j.Steps[1].Resumed)
	out, err := r.Run(t.Context(), p)
	require.ErrorIs(t, err, ErrNeedsAttention)
	require.Contains(t, out.Failure.Error, "interrupted 2 times")
	require.Empty(t, h.Calls())
}

func TestResetRespectsLock(t *testing.T) {
	h := &scriptedHost{}
	dir := t.TempDir()
	r := newTestRunner(t, h, dir)
	_, err := r.Run(t.Context(), threeStepPlan())
	require.NoError(t, err)
	path := journalPath(t, r, "p")

	unlock, err := lockFile(path + ".lock")
	require.NoError(t, err)
	err = r.Reset("p")
	require.ErrorIs(t, err, ErrJournalLocked)
	var je *JournalError
	require.ErrorAs(t, err, &je)
	require.Equal(t, path, je.Path)
	require.FileExists(t, path, "a locked journal is not deleted")
	unlock()

	require.NoError(t, r.Reset("p"))
	require.NoFileExists(t, path)
	require.NoError(t, r.Reset("p"), "resetting twice is fine")
	require.NoError(t, newTestRunner(t, h, filepath.Join(dir, "missing")).Reset("p"))
}

func TestRollbackStopsAtStepThatCannotBeUndone(t *testing.T) {
	p := threeStepPlan()
	p.RollbackOnFailure = true
	p.Steps[1].Rollback = nil // "two" is like `kubeadm upgrade apply`

	t.Run("stops in NeedsAttention", func(t *testing.T) {
		h := &scriptedHost{exits: map[string][]int{"three/run": {1}}}
		out, err := newTestRunner(t, h, t.TempDir()).Run(t.Context(), p)
		require.ErrorIs(t, err, ErrNeedsAttention)
		require.Equal(t, PlanStateNeedsAttention, out.State)
		require.Equal(t, []string{"one/backup", "one/run", "two/run", "three/backup", "three/run", "three/rollback"}, h.Calls(),
			"one is not rolled back under two")
		require.Equal(t, []StepState{StepStateSucceeded, StepStateSucceeded, StepStateRolledBack}, states(out))
		require.Equal(t, "two", out.Failure.Step)
		require.Equal(t, PhaseRollback, out.Failure.Phase)
		require.Contains(t, out.Failure.Error, `rollback stopped at step "two"`)
		require.Contains(t, out.Failure.Error, `step "three" failed (exit 1)`)
	})
	t.Run("NothingToUndo lets the rollback pass", func(t *testing.T) {
		p := p
		p.Steps = append([]Step(nil), p.Steps...)
		p.Steps[1].NothingToUndo = true
		h := &scriptedHost{exits: map[string][]int{"three/run": {1}}}
		out, err := newTestRunner(t, h, t.TempDir()).Run(t.Context(), p)
		require.ErrorIs(t, err, ErrRolledBack)
		require.Equal(t, []StepState{StepStateRolledBack, StepStateSucceeded, StepStateRolledBack}, states(out))
		require.Contains(t, h.Calls(), "one/rollback")
	})
	t.Run("a failed step without rollback does not block", func(t *testing.T) {
		h := &scriptedHost{exits: map[string][]int{"two/run": {1}}}
		out, err := newTestRunner(t, h, t.TempDir()).Run(t.Context(), p)
		require.ErrorIs(t, err, ErrRolledBack)
		require.Equal(t, []string{"one/backup", "one/run", "two/run", "one/rollback"}, h.Calls())
		require.Equal(t, PlanStateRolledBack, out.State)
	})
}

// The journal holds step output (which can include secrets a command
// printed): only its owner may read it, whatever the umask.
func TestJournalIsPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, JournalFileName("p"))
	require.NoError(t, writeJournal(path, newJournal(Plan{Name: "p", Steps: []Step{{Name: "a", Argv: []string{"true"}}}}, "fp")))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")
}

func journalPath(t *testing.T, r *Runner, plan string) string {
	t.Helper()
	p, err := r.JournalPath(plan)
	require.NoError(t, err)
	return p
}

// TestJournalNamesStayInTheJournalDirectory: Reset and JournalPath refuse
// names that could reach outside the journal directory, and Reset deletes
// nothing then.
func TestJournalNamesStayInTheJournalDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "journal")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	victim := filepath.Join(root, "x.journal.json")
	require.NoError(t, os.WriteFile(victim, []byte("not ours"), 0o600))
	r, err := NewRunner(&scriptedHost{}, RunnerOptions{JournalDir: dir})
	require.NoError(t, err)
	for _, name := range []string{"../x", "", "a/b", "/abs", "x\x00", "UPPER", strings.Repeat("a", 64)} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			err := r.Reset(name)
			require.ErrorIs(t, err, errInvalidName)
			require.ErrorIs(t, err, ErrInvalidPlan)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, "name", ve.Field)
			_, err = r.JournalPath(name)
			require.ErrorIs(t, err, errInvalidName)
		})
	}
	_, err = os.Stat(victim)
	require.NoError(t, err, "the file outside the journal directory is still there")
}
