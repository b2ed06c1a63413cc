package nodeexec

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestRollbackOnRequest(t *testing.T) {
	tests := []struct {
		name string
		// plan changes threeStepPlan; nil keeps it.
		plan func(*Plan)
		// exits scripts the host for the run that prepares the journal.
		exits map[string][]int
		// prepare brings the journal into the state under test; nil runs
		// the plan once.
		prepare    func(t *testing.T, r *Runner, h *scriptedHost, p Plan)
		wantCalls  []string
		wantStates []StepState
		wantState  PlanState
		wantErr    error
		// wantFailure is the failing step recorded after the rollback
		// ("" for none).
		wantFailure string
		wantError   string
	}{
		{
			name:       "succeeded plan: every step undone in reverse order",
			wantCalls:  []string{"three/rollback", "two/rollback", "one/rollback"},
			wantStates: []StepState{StepStateRolledBack, StepStateRolledBack, StepStateRolledBack},
			wantState:  PlanStateRolledBack,
		},
		{
			name:        "failed plan: the failed step and the ones before it",
			exits:       map[string][]int{"two/run": {1}},
			wantCalls:   []string{"two/rollback", "one/rollback"},
			wantStates:  []StepState{StepStateRolledBack, StepStateRolledBack, StepStatePending},
			wantState:   PlanStateRolledBack,
			wantFailure: "two",
		},
		{
			name:        "failed backup: nothing to restore for that step",
			exits:       map[string][]int{"three/backup": {2}},
			wantCalls:   []string{"two/rollback", "one/rollback"},
			wantStates:  []StepState{StepStateRolledBack, StepStateRolledBack, StepStateFailed},
			wantState:   PlanStateRolledBack,
			wantFailure: "three",
		},
		{
			name:       "a step its check skipped was not done by the plan",
			plan:       func(p *Plan) { p.Steps[1].Check = []string{"is-done"} },
			exits:      map[string][]int{"two/check": {0}},
			wantCalls:  []string{"three/rollback", "one/rollback"},
			wantStates: []StepState{StepStateRolledBack, StepStateSkipped, StepStateRolledBack},
			wantState:  PlanStateRolledBack,
		},
		{
			name:       "NothingToUndo steps are passed over",
			plan:       func(p *Plan) { p.Steps[1].Rollback, p.Steps[1].NothingToUndo = nil, true },
			wantCalls:  []string{"three/rollback", "one/rollback"},
			wantStates: []StepState{StepStateRolledBack, StepStateSucceeded, StepStateRolledBack},
			wantState:  PlanStateRolledBack,
		},
		{
			name:        "a completed step that cannot be undone stops the rollback",
			plan:        func(p *Plan) { p.Steps[1].Rollback = nil },
			wantCalls:   []string{"three/rollback"},
			wantStates:  []StepState{StepStateSucceeded, StepStateSucceeded, StepStateRolledBack},
			wantState:   PlanStateNeedsAttention,
			wantErr:     ErrNeedsAttention,
			wantFailure: "two",
			wantError:   "the rollback was requested while the plan was Succeeded",
		},
		{
			name:        "already rolled back on failure: nothing runs twice",
			plan:        func(p *Plan) { p.RollbackOnFailure = true },
			exits:       map[string][]int{"three/run": {1}},
			wantStates:  []StepState{StepStateRolledBack, StepStateRolledBack, StepStateRolledBack},
			wantState:   PlanStateRolledBack,
			wantFailure: "three",
		},
		{
			name:        "NeedsAttention after a failed automatic rollback: the failed rollback is retried",
			plan:        func(p *Plan) { p.RollbackOnFailure = true },
			exits:       map[string][]int{"three/run": {1}, "two/rollback": {9, 0}},
			wantCalls:   []string{"two/rollback", "one/rollback"},
			wantStates:  []StepState{StepStateRolledBack, StepStateRolledBack, StepStateRolledBack},
			wantState:   PlanStateRolledBack,
			wantFailure: "two",
		},
		{
			name: "NeedsAttention after an interrupted non-idempotent step: it is rolled back as failed",
			plan: func(p *Plan) { p.Steps[1].Idempotent = false },
			prepare: func(t *testing.T, r *Runner, h *scriptedHost, p Plan) {
				interruptAt(t, r, h, p, "two/run")
				_, err := r.Run(t.Context(), p)
				require.ErrorIs(t, err, ErrNeedsAttention)
			},
			wantCalls:   []string{"two/rollback", "one/rollback"},
			wantStates:  []StepState{StepStateRolledBack, StepStateRolledBack, StepStatePending},
			wantState:   PlanStateRolledBack,
			wantFailure: "two",
		},
		{
			name: "runner died mid-step (journal Running, lock free)",
			prepare: func(t *testing.T, r *Runner, h *scriptedHost, p Plan) {
				interruptAt(t, r, h, p, "three/run")
			},
			wantCalls:  []string{"three/rollback", "two/rollback", "one/rollback"},
			wantStates: []StepState{StepStateRolledBack, StepStateRolledBack, StepStateRolledBack},
			wantState:  PlanStateRolledBack,
		},
		{
			name: "stopped after a step, between two init containers",
			prepare: func(t *testing.T, r *Runner, h *scriptedHost, p Plan) {
				_, err := newTestRunner(t, h, r.store.(FileJournalStore).Dir, RunnerOptions{StopAfter: "one"}).Run(t.Context(), p)
				require.NoError(t, err)
			},
			wantCalls:  []string{"one/rollback"},
			wantStates: []StepState{StepStateRolledBack, StepStatePending, StepStatePending},
			wantState:  PlanStateRolledBack,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := threeStepPlan()
			if tt.plan != nil {
				tt.plan(&p)
			}
			h := &scriptedHost{exits: tt.exits}
			r := newTestRunner(t, h, t.TempDir())
			if tt.prepare != nil {
				tt.prepare(t, r, h, p)
			} else {
				_, _ = r.Run(t.Context(), p)
			}
			before, err := ReadJournal(journalPath(t, r, p.Name))
			require.NoError(t, err)
			h.reset()

			out, err := r.Rollback(t.Context(), p)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				var pe *PlanError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, tt.wantState, pe.State)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.wantCalls, h.Calls())
			require.Equal(t, tt.wantStates, states(out))
			for _, st := range out.Steps {
				// When a step was rolled back is recorded, and only then.
				require.Equal(t, st.State == StepStateRolledBack, !st.RolledBack.IsZero(), "step %s (%s): RolledBack %v", st.Name, st.State, st.RolledBack)
			}
			require.Equal(t, tt.wantState, out.State)
			if tt.wantFailure == "" {
				require.Nil(t, out.Failure)
			} else {
				require.NotNil(t, out.Failure)
				require.Equal(t, tt.wantFailure, out.Failure.Step)
			}
			if tt.wantError != "" {
				require.Contains(t, out.Failure.Error, tt.wantError)
			}
			for _, c := range h.cmds {
				require.Equal(t, PhaseRollback, c.Phase, "a rollback runs rollback argvs only")
			}

			// The journal on disk is what Rollback returned.
			j, err := ReadJournal(journalPath(t, r, p.Name))
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(out, j.Outcome))
			if len(tt.wantCalls) > 0 {
				require.Equal(t, before.Runs+1, j.Runs, "a rollback that acts counts as a run")
			}

			// Asking again runs nothing new: a finished rollback is final,
			// a stopped one stops at the same place.
			h.reset()
			again, err := r.Rollback(t.Context(), p)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Empty(t, h.Calls())
			require.Equal(t, tt.wantStates, states(again))

			// And Run does not undo the rollback.
			_, err = r.Run(t.Context(), p)
			require.Error(t, err)
			require.Empty(t, h.Calls())
		})
	}
}

func TestRequestedRollbackFailsThenIsRetried(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"two/rollback": {9, 0}}}
	p := threeStepPlan()
	r := newTestRunner(t, h, t.TempDir())
	_, err := r.Run(t.Context(), p)
	require.NoError(t, err)
	h.reset()

	out, err := r.Rollback(t.Context(), p)
	require.ErrorIs(t, err, ErrNeedsAttention)
	require.Equal(t, []string{"three/rollback", "two/rollback"}, h.Calls(), "one is not rolled back under a step that is still upgraded")
	require.Equal(t, []StepState{StepStateSucceeded, StepStateRollingBack, StepStateRolledBack}, states(out))
	require.Equal(t, Failure{Step: "two", Phase: PhaseRollback, ExitCode: 9, Output: "two/rollback output",
		Error: "requested rollback of the Succeeded plan failed", Attempts: 1}, *out.Failure)

	// Once the cause is fixed, asking again retries from the failed step.
	h.reset()
	out, err = r.Rollback(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, []string{"two/rollback", "one/rollback"}, h.Calls())
	require.Equal(t, PlanStateRolledBack, out.State)
}

// interruptRollbackAt starts Rollback, waits until the host runs at (which
// blocks), and cancels, leaving the journal as a crash would.
func interruptRollbackAt(t *testing.T, r *Runner, h *scriptedHost, p Plan, at string) {
	t.Helper()
	h.block = at
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := r.Rollback(ctx, p); done <- err }()
	require.Eventually(t, func() bool {
		c := h.Calls()
		return len(c) > 0 && c[len(c)-1] == at
	}, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	h.block = ""
	h.reset()
}

func TestRequestedRollbackResumesAfterCrash(t *testing.T) {
	resumers := map[string]func(*Runner, context.Context, Plan) (Outcome, error){
		"Rollback": (*Runner).Rollback,
		"Run":      (*Runner).Run,
	}
	for name, resume := range resumers {
		t.Run("resumed by "+name, func(t *testing.T) {
			h := &scriptedHost{}
			p := threeStepPlan()
			r := newTestRunner(t, h, t.TempDir())
			_, err := r.Run(t.Context(), p)
			require.NoError(t, err)
			h.reset()

			interruptRollbackAt(t, r, h, p, "two/rollback")
			j, err := ReadJournal(journalPath(t, r, p.Name))
			require.NoError(t, err)
			require.Equal(t, PlanStateRollingBack, j.State)
			require.Equal(t, []StepState{StepStateSucceeded, StepStateRollingBack, StepStateRolledBack}, states(j.Outcome))

			out, err := resume(newTestRunner(t, h, r.store.(FileJournalStore).Dir), t.Context(), p)
			if name == "Run" {
				require.ErrorIs(t, err, ErrRolledBack, "Run reports a rolled-back plan as not succeeded")
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, []string{"two/rollback", "one/rollback"}, h.Calls(), "three is not undone twice; two is redone")
			require.Equal(t, PlanStateRolledBack, out.State)
			require.Equal(t, 3, out.Runs, "run, rollback, resume")
		})
	}
}

func TestRollbackRefusals(t *testing.T) {
	tests := []struct {
		name string
		// setup prepares dir (the runner's journal directory) and returns
		// the plan to roll back and a function releasing anything it holds.
		setup func(t *testing.T, dir string) Plan
		ctx   func(context.Context) context.Context
		want  []error
	}{
		{
			name:  "plan that never ran",
			setup: func(t *testing.T, dir string) Plan { return threeStepPlan() },
			want:  []error{ErrNoJournal, fs.ErrNotExist},
		},
		{
			name: "journal directory missing",
			setup: func(t *testing.T, dir string) Plan {
				require.NoError(t, os.Remove(dir))
				return threeStepPlan()
			},
			want: []error{ErrNoJournal, fs.ErrNotExist},
		},
		{
			name: "plan is running (lock held)",
			setup: func(t *testing.T, dir string) Plan {
				runOnce(t, dir, threeStepPlan())
				unlock, err := lockFile(filepath.Join(dir, JournalFileName("p")) + ".lock")
				require.NoError(t, err)
				t.Cleanup(unlock)
				return threeStepPlan()
			},
			want: []error{ErrJournalLocked},
		},
		{
			name: "journal of another version of the plan",
			setup: func(t *testing.T, dir string) Plan {
				runOnce(t, dir, threeStepPlan())
				p := threeStepPlan()
				p.Steps[0].Rollback = []string{"restore-differently"}
				return p
			},
			want: []error{ErrJournalMismatch},
		},
		{
			name: "corrupt journal",
			setup: func(t *testing.T, dir string) Plan {
				require.NoError(t, os.WriteFile(filepath.Join(dir, JournalFileName("p")), []byte("{not json"), 0o600))
				return threeStepPlan()
			},
			want: []error{ErrJournalCorrupt},
		},
		{
			name: "terminal journal whose steps contradict each other",
			setup: func(t *testing.T, dir string) Plan {
				p := threeStepPlan()
				j := newJournal(p, p.Fingerprint())
				j.State = PlanStateNeedsAttention
				j.Steps[0].State, j.Steps[1].State = StepStateRunning, StepStateRunning
				b, err := json.Marshal(j)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, JournalFileName("p")), b, 0o600))
				return p
			},
			want: []error{ErrJournalCorrupt},
		},
		{
			name: "invalid plan",
			setup: func(t *testing.T, dir string) Plan {
				runOnce(t, dir, threeStepPlan())
				p := threeStepPlan()
				p.Steps[2].Rollback = []string{""}
				return p
			},
			want: []error{ErrInvalidPlan, errEmptyArgv},
		},
		{
			name: "context already cancelled",
			setup: func(t *testing.T, dir string) Plan {
				runOnce(t, dir, threeStepPlan())
				return threeStepPlan()
			},
			ctx: func(ctx context.Context) context.Context {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx
			},
			want: []error{context.Canceled},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := tt.setup(t, dir)
			path := filepath.Join(dir, JournalFileName("p"))
			before, readErr := os.ReadFile(path)
			ctx := t.Context()
			if tt.ctx != nil {
				ctx = tt.ctx(ctx)
			}
			h := &scriptedHost{}
			_, err := newTestRunner(t, h, dir).Rollback(ctx, p)
			for _, want := range tt.want {
				require.ErrorIs(t, err, want)
			}
			require.Empty(t, h.Calls(), "nothing runs")
			after, afterErr := os.ReadFile(path)
			require.Equal(t, readErr == nil, afterErr == nil, "no journal appears or disappears")
			require.Equal(t, before, after, "the journal is untouched")
			if tt.name == "journal directory missing" {
				require.NoDirExists(t, dir, "a refused rollback creates nothing")
			}
		})
	}
}

// runOnce runs p to success in dir.
func runOnce(t *testing.T, dir string, p Plan) {
	t.Helper()
	_, err := newTestRunner(t, &scriptedHost{}, dir).Run(t.Context(), p)
	require.NoError(t, err)
}

// FuzzRollback hands Rollback journals of threeStepPlan (variants) in every
// combination of plan and step states, including the terminal ones Run
// never resumes and combinations no runner writes. Whatever the journal,
// Rollback must not panic, must fail only with a corrupt-journal or
// needs-attention error, and may only undo steps that ran, newest first,
// each once.
func FuzzRollback(f *testing.F) {
	f.Add(uint8(2), uint8(2), uint8(2), uint8(2), uint8(0b101), uint8(0), uint8(0))     // Succeeded
	f.Add(uint8(3), uint8(2), uint8(4), uint8(0), uint8(0b001), uint8(0), uint8(0))     // Failed at two
	f.Add(uint8(5), uint8(2), uint8(1), uint8(0), uint8(0b001), uint8(0), uint8(0))     // NeedsAttention, interrupted two
	f.Add(uint8(5), uint8(2), uint8(5), uint8(6), uint8(0b101), uint8(0), uint8(0))     // NeedsAttention, failed rollback of two
	f.Add(uint8(1), uint8(2), uint8(5), uint8(6), uint8(0b101), uint8(0), uint8(0))     // RollingBack (crash mid-rollback)
	f.Add(uint8(2), uint8(2), uint8(2), uint8(2), uint8(0b101), uint8(0b010), uint8(0)) // two cannot be undone
	f.Add(uint8(2), uint8(2), uint8(2), uint8(2), uint8(0b101), uint8(0b010), uint8(0b010))
	f.Add(uint8(0), uint8(2), uint8(1), uint8(0), uint8(0b001), uint8(0), uint8(0)) // Running, runner died
	f.Add(uint8(5), uint8(1), uint8(1), uint8(0), uint8(0), uint8(0), uint8(0))     // contradictory
	f.Add(uint8(4), uint8(6), uint8(6), uint8(6), uint8(0b111), uint8(0), uint8(0)) // RolledBack
	planStates := []PlanState{PlanStateRunning, PlanStateRollingBack, PlanStateSucceeded, PlanStateFailed, PlanStateRolledBack, PlanStateNeedsAttention}
	stepStates := []StepState{StepStatePending, StepStateRunning, StepStateSucceeded, StepStateSkipped, StepStateFailed, StepStateRollingBack, StepStateRolledBack}
	f.Fuzz(func(t *testing.T, ps, s0, s1, s2, backups, noRollback, nothingToUndo uint8) {
		p := threeStepPlan()
		for i := range p.Steps {
			if noRollback&(1<<i) != 0 {
				p.Steps[i].Rollback = nil
				p.Steps[i].NothingToUndo = nothingToUndo&(1<<i) != 0
			}
		}
		j := newJournal(p, p.Fingerprint())
		j.State = planStates[int(ps)%len(planStates)]
		in := []StepState{stepStates[int(s0)%len(stepStates)], stepStates[int(s1)%len(stepStates)], stepStates[int(s2)%len(stepStates)]}
		for i := range j.Steps {
			j.Steps[i].State = in[i]
			j.Steps[i].BackupTaken = backups&(1<<i) != 0
		}
		dir := t.TempDir()
		path := filepath.Join(dir, JournalFileName(p.Name))
		data, err := json.Marshal(j)
		require.NoError(t, err)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		h := &scriptedHost{}
		r, err := NewRunner(h, RunnerOptions{JournalDir: dir})
		require.NoError(t, err)

		out, err := r.Rollback(context.Background(), p)
		calls := h.Calls()
		var pe *PlanError
		switch {
		case err == nil:
			require.Equal(t, PlanStateRolledBack, out.State)
		case errors.Is(err, ErrJournalCorrupt):
			require.Empty(t, calls)
			after, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			require.Equal(t, data, after, "a refused journal is untouched")
			return
		case errors.As(err, &pe) && errors.Is(err, ErrNeedsAttention):
			// The host never fails, so only a step that cannot be undone
			// stops the rollback.
			k := slices.IndexFunc(p.Steps, func(s Step) bool { return s.Name == out.Failure.Step })
			require.GreaterOrEqual(t, k, 0)
			require.Equal(t, StepStateSucceeded, in[k])
			require.Nil(t, p.Steps[k].Rollback)
			require.False(t, p.Steps[k].NothingToUndo)
		default:
			t.Fatalf("unexpected error class: %v", err)
		}
		last := len(p.Steps)
		for _, c := range calls {
			step, phase, _ := strings.Cut(c, "/")
			require.Equal(t, string(PhaseRollback), phase)
			k := slices.IndexFunc(p.Steps, func(s Step) bool { return s.Name == step })
			require.Less(t, k, last, "rollbacks run newest first, each once: %v", calls)
			last = k
			require.Contains(t, []StepState{StepStateRunning, StepStateSucceeded, StepStateFailed, StepStateRollingBack}, in[k], "only steps that ran are undone: %v from %v", calls, in)
			require.Equal(t, StepStateRolledBack, out.Steps[k].State)
		}
		onDisk, err := ReadJournal(path)
		require.NoError(t, err)
		require.Empty(t, cmp.Diff(out, onDisk.Outcome))

		h.reset()
		_, _ = r.Rollback(context.Background(), p)
		require.Empty(t, h.Calls(), "a second rollback undoes nothing again")
	})
}
