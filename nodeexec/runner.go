package nodeexec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Runner executes plans step by step, journaling every state change to a
// file before and after it happens, so that a runner restarted after a
// crash resumes where the previous one stopped.
//
// Guarantees, per step:
//   - a step recorded as Succeeded or Skipped is never run again;
//   - a step recorded as Running (started, outcome unknown) is handled by
//     its InterruptPolicy: re-run, check, roll back and re-run, or stop in
//     PlanStateNeedsAttention;
//   - a backup is taken at most once, before the first attempt;
//   - a plan whose journal is terminal is not run again: Run returns the
//     recorded outcome.
//
// Rollback undoes a plan on request with the same journal; Reset deletes
// the journal so the plan can run again.
//
// A Runner is safe for concurrent use on different plans; two runners on
// the same plan and journal directory exclude each other with a lock file
// (ErrJournalLocked).
type Runner struct {
	exec        Executor
	store       JournalStore
	pid         int
	direct      bool
	log         logr.Logger
	clock       clock.Clock
	outputLimit int
	maxResumes  int
	progress    func(Outcome)
	stopAfter   string
	summaryFile string
	softStop    context.Context
}

// NewRunner returns a Runner that executes commands through exec,
// configured by opts (RunnerOptions{} for the defaults). A nil exec or an
// unusable option is an error wrapping ErrInvalidOption that names it.
func NewRunner(exec Executor, opts RunnerOptions) (*Runner, error) {
	if exec == nil {
		return nil, fmt.Errorf("nodeexec: NewRunner: nil Executor: %w", ErrInvalidOption)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	store := o.JournalStore
	if store == nil {
		store = FileJournalStore{Dir: o.JournalDir}
	}
	return &Runner{
		exec:        exec,
		store:       store,
		pid:         o.TargetPID,
		direct:      o.Direct,
		log:         o.Logger,
		clock:       o.Clock,
		outputLimit: o.JournalOutputLimit,
		maxResumes:  o.MaxResumes,
		progress:    o.Progress,
		stopAfter:   o.StopAfter,
		summaryFile: o.SummaryFile,
		softStop:    o.SoftStop,
	}, nil
}

// JournalPath returns where the journal of the named plan lives: its
// file in the journal directory, or what the RunnerOptions.JournalStore's
// Path says. A name that is not a valid plan name (CheckPlanName: "../x",
// "a/b", "") is a *ValidationError: it could name a file outside the
// journal directory.
func (r *Runner) JournalPath(planName string) (string, error) {
	if err := CheckPlanName(planName); err != nil {
		return "", err
	}
	return r.store.Path(planName), nil
}

// Reset deletes the journal of the named plan so the next Run starts from
// the first step. It is the explicit way to retry a plan that ended in a
// terminal state.
//
// Reset takes the journal's lock first, so it never deletes the journal
// of a plan a runner is executing: it then returns a *JournalError
// wrapping ErrJournalLocked and leaves the file alone.
//
// A name that is not a valid plan name is a *ValidationError and nothing
// is deleted.
func (r *Runner) Reset(planName string) error {
	path, err := r.JournalPath(planName)
	if err != nil {
		return err
	}
	unlock, err := r.store.Lock(planName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no journal directory, so no journal
	}
	if err != nil {
		return &JournalError{Path: path, Err: err}
	}
	defer unlock()
	if err := r.store.Remove(planName); err != nil {
		return &JournalError{Path: path, Err: err}
	}
	return nil
}

// Run executes plan, resuming from its journal if one exists. It returns
// the outcome and, when the plan did not succeed, a *PlanError (or a
// validation, journal or context error, in which case nothing or only part
// was run and the journal shows how far it got).
func (r *Runner) Run(ctx context.Context, plan Plan) (Outcome, error) {
	if err := plan.Validate(); err != nil {
		return Outcome{}, err
	}
	// A context that already ended must not count as a run, a resume or
	// an attempt in the journal.
	if err := interrupted(ctx); err != nil {
		return Outcome{}, err
	}
	stopAt := len(plan.Steps) - 1
	if r.stopAfter != "" {
		stopAt = -1
		for i, st := range plan.Steps {
			if st.Name == r.stopAfter {
				stopAt = i
			}
		}
		if stopAt < 0 {
			return Outcome{}, &ValidationError{Field: "stopAfter", Err: errInvalidName, Detail: fmt.Sprintf("plan has no step %q", r.stopAfter)}
		}
	}
	if err := r.store.Init(); err != nil {
		var je *JournalError
		if !errors.As(err, &je) {
			err = &JournalError{Path: r.store.Path(plan.Name), Err: err}
		}
		return Outcome{}, err
	}
	path, err := r.JournalPath(plan.Name) // validated: cannot fail
	if err != nil {
		return Outcome{}, err
	}
	j, found, unlock, err := r.openJournal(path, plan)
	if err != nil {
		return Outcome{}, err
	}
	defer unlock()
	if !found {
		j = newJournal(plan, plan.Fingerprint())
	}
	log := r.log.WithValues("plan", plan.Name, "node", plan.Node)
	if j.State.Terminal() {
		log.Info("plan already finished; nothing to run", "state", j.State)
		r.writeSummary(j.Outcome)
		return j.Outcome.clone(), terminalError(j.Outcome)
	}
	j.Runs++
	s := &session{r: r, plan: plan, j: &j, path: path, log: log}
	if err := s.persist(); err != nil {
		return j.Outcome.clone(), err
	}
	log.Info("plan started", "run", j.Runs, "journal", path)

	if j.State == PlanStateRollingBack {
		if err := s.rollback(ctx); err != nil {
			return j.Outcome.clone(), err
		}
	}
	for i := 0; i <= stopAt && !j.State.Terminal(); i++ {
		if r.softStop != nil && r.softStop.Err() != nil && j.Steps[i].State == StepStatePending {
			log.Info("stop requested; not starting the next step", "step", plan.Steps[i].Name)
			return j.Outcome.clone(), fmt.Errorf("nodeexec: interrupted before step %q: %w", plan.Steps[i].Name, context.Canceled)
		}
		if err := s.step(ctx, i); err != nil {
			return j.Outcome.clone(), err
		}
	}
	if !j.State.Terminal() && stopAt < len(plan.Steps)-1 {
		log.Info("stopping after step as requested", "step", r.stopAfter)
		return j.Outcome.clone(), nil
	}
	if !j.State.Terminal() {
		j.State = PlanStateSucceeded
		if err := s.persist(); err != nil {
			return j.Outcome.clone(), err
		}
	}
	log.Info("plan finished", "state", j.State)
	return j.Outcome.clone(), terminalError(j.Outcome)
}

// openJournal takes the lock of the journal at path and reads it, checking
// that it was written for plan. found is false when there is no journal
// yet. On success the caller owns the lock and must call unlock; on error
// the lock is already released. A journal directory that does not exist
// is an error wrapping fs.ErrNotExist.
func (r *Runner) openJournal(path string, plan Plan) (j Journal, found bool, unlock func(), err error) {
	unlock, err = r.store.Lock(plan.Name)
	if err != nil {
		return Journal{}, false, nil, &JournalError{Path: path, Err: err}
	}
	data, err := r.store.Read(plan.Name)
	if errors.Is(err, fs.ErrNotExist) {
		return Journal{}, false, unlock, nil
	}
	if err == nil {
		if j, err = DecodeJournal(data); err != nil {
			var je *JournalError
			if errors.As(err, &je) {
				je.Path = path
			}
		}
	}
	if err == nil {
		err = journalMatches(path, j, plan)
	}
	if err != nil {
		unlock()
		var je *JournalError
		if !errors.As(err, &je) {
			err = &JournalError{Path: path, Err: err}
		}
		return Journal{}, false, nil, err
	}
	return j, true, unlock, nil
}

// journalMatches refuses a journal written for another plan (name or
// fingerprint) or whose steps are not the plan's.
func journalMatches(path string, j Journal, plan Plan) error {
	if fp := plan.Fingerprint(); j.Plan != plan.Name || j.Fingerprint != fp {
		return &JournalError{Path: path, Err: ErrJournalMismatch,
			Detail: fmt.Sprintf("journal is for plan %q fingerprint %.12s, running plan %q fingerprint %.12s", j.Plan, j.Fingerprint, plan.Name, fp)}
	}
	if len(j.Steps) != len(plan.Steps) {
		return &JournalError{Path: path, Err: ErrJournalCorrupt, Detail: "step count differs from the plan"}
	}
	for i := range j.Steps {
		if j.Steps[i].Name != plan.Steps[i].Name {
			return &JournalError{Path: path, Err: ErrJournalCorrupt, Detail: fmt.Sprintf("steps[%d] is %q, plan has %q", i, j.Steps[i].Name, plan.Steps[i].Name)}
		}
	}
	return nil
}

// Rollback undoes plan on request: an operator (or a controller) decides
// that a plan that ended Failed, NeedsAttention or even Succeeded must be
// taken back. It runs the Rollback argv of every step that ran, in reverse
// order, with the same machinery and guarantees as RollbackOnFailure:
//
//   - a step that failed, or that was interrupted (found Running in the
//     journal because its runner died), is rolled back like a failed step;
//   - a step that declares a Backup which was never taken is passed over
//     (there is nothing to restore), as are Skipped and Pending steps and
//     steps that declare NothingToUndo;
//   - a completed step with neither a Rollback argv nor NothingToUndo
//     stops the rollback in PlanStateNeedsAttention, leaving the steps before
//     it as they are;
//   - every transition is journaled before the command runs, so a
//     rollback interrupted by a crash or a cancelled context is resumed by
//     the next Rollback (or Run) call: steps already RolledBack are not
//     undone twice, the step that was RollingBack is rolled back again
//     (rollback argvs must be idempotent, as restoring a backup is);
//   - a plan already RolledBack runs nothing and returns its outcome.
//
// Rollback returns the outcome and a nil error when the plan ends
// PlanStateRolledBack; a *PlanError wrapping ErrNeedsAttention when it stops in
// PlanStateNeedsAttention (Rollback may be called again once the cause is
// fixed: it retries the rollback that failed). It refuses, running nothing
// and leaving the journal untouched, with a *JournalError wrapping:
//
//   - ErrNoJournal (and fs.ErrNotExist) when the plan has no journal in the
//     runner's directory: nothing of it ran there, or it was Reset;
//   - ErrJournalLocked when a runner holds the journal's lock (the plan is
//     running: stop or delete the upgrader pod first);
//   - ErrJournalMismatch when the journal was written for another plan or
//     another version of it (undoing with different rollback argvs than
//     the steps that ran would be a guess);
//   - ErrJournalCorrupt when the journal cannot be decoded or its step
//     states contradict each other.
//
// The runner's RunnerOptions.StopAfter does not apply to Rollback. After a
// rollback, Run returns the RolledBack outcome until Reset is called.
func (r *Runner) Rollback(ctx context.Context, plan Plan) (Outcome, error) {
	if err := plan.Validate(); err != nil {
		return Outcome{}, err
	}
	if err := interrupted(ctx); err != nil {
		return Outcome{}, err
	}
	path, err := r.JournalPath(plan.Name) // validated: cannot fail
	if err != nil {
		return Outcome{}, err
	}
	j, found, unlock, err := r.openJournal(path, plan)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Outcome{}, err
	}
	if err != nil || !found {
		if unlock != nil {
			unlock()
		}
		return Outcome{}, &JournalError{Path: path, Err: fmt.Errorf("%w: %w", ErrNoJournal, fs.ErrNotExist),
			Detail: "nothing of the plan ran with this journal directory, so there is nothing to roll back"}
	}
	defer unlock()
	log := r.log.WithValues("plan", plan.Name, "node", plan.Node)
	s := &session{r: r, plan: plan, j: &j, path: path, log: log}
	switch j.State {
	case PlanStateRolledBack:
		log.Info("plan already rolled back; nothing to undo")
		r.writeSummary(j.Outcome)
		return j.Outcome.clone(), nil
	case PlanStateRollingBack:
		log.Info("resuming an interrupted rollback")
	default:
		s.requestedFrom = j.State
		for i := range j.Steps {
			if j.Steps[i].State == StepStateRunning {
				j.Steps[i].State = StepStateFailed
				j.Steps[i].Note = "interrupted while running; rolled back as a failed step"
			}
		}
		j.State = PlanStateRollingBack
		// Terminal journals are not checked when read (they are only
		// reported); this one is about to be acted on.
		if err := checkStepStates(j.Outcome); err != nil {
			return Outcome{}, &JournalError{Path: path, Err: ErrJournalCorrupt, Detail: err.Error()}
		}
	}
	j.Runs++
	if err := s.persist(); err != nil {
		return j.Outcome.clone(), err
	}
	log.Info("rollback started", "run", j.Runs, "journal", path, "from", s.requestedFrom)
	if err := s.rollback(ctx); err != nil {
		return j.Outcome.clone(), err
	}
	log.Info("rollback finished", "state", j.State)
	if j.State == PlanStateRolledBack {
		return j.Outcome.clone(), nil
	}
	return j.Outcome.clone(), terminalError(j.Outcome)
}

func newJournal(plan Plan, fp string) Journal {
	j := Journal{Version: journalVersion, Fingerprint: fp, Outcome: Outcome{Plan: plan.Name, Node: plan.Node, State: PlanStateRunning}}
	j.Steps = make([]StepRecord, len(plan.Steps))
	for i, s := range plan.Steps {
		j.Steps[i] = StepRecord{Name: s.Name, State: StepStatePending}
	}
	return j
}

func terminalError(o Outcome) error {
	if o.State == PlanStateSucceeded || !o.State.Terminal() {
		return nil
	}
	e := &PlanError{Plan: o.Plan, State: o.State}
	if o.Failure != nil {
		e.Failure = *o.Failure
	}
	return e
}

func (o Outcome) clone() Outcome {
	c := o
	c.Steps = append([]StepRecord(nil), o.Steps...)
	if o.Failure != nil {
		f := *o.Failure
		c.Failure = &f
	}
	return c
}

// session is one Run call on one plan.
type session struct {
	r    *Runner
	plan Plan
	j    *Journal
	path string
	log  logr.Logger
	// requestedFrom is the state the plan was in when Rollback was
	// called; empty for a rollback on failure (or a resumed one).
	requestedFrom PlanState
}

func (s *session) persist() error {
	s.j.Updated = s.r.clock.Now().UTC()
	data, err := encodeJournal(*s.j)
	if err == nil {
		err = s.r.store.Write(s.plan.Name, data)
	}
	if err != nil {
		return &JournalError{Path: s.path, Err: err}
	}
	if s.r.progress != nil {
		s.r.progress(s.j.Outcome.clone())
	}
	s.r.writeSummary(s.j.Outcome)
	return nil
}

func (s *session) tail(b []byte) string {
	if len(b) > s.r.outputLimit {
		b = b[len(b)-s.r.outputLimit:]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// exec runs one argv of step i with the step's deadline.
func (s *session) exec(ctx context.Context, i int, phase Phase, argv []string) (Result, error) {
	st := s.plan.Steps[i]
	cmd := Command{Step: st.Name, Phase: phase, Argv: argv}
	for _, e := range st.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	if !s.r.direct && !st.InContainer {
		cmd.Target = &Target{PID: s.r.pid, Namespaces: st.EffectiveNamespaces()}
	}
	actx := ctx
	if st.Timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, st.Timeout)
		defer cancel()
	}
	res, err := s.r.exec.Run(actx, cmd)
	if err == nil && actx.Err() != nil && ctx.Err() == nil {
		// An executor that ignored the deadline still lost the race.
		err = actx.Err()
	}
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("deadline of %v exceeded: %w", st.Timeout, err)
	}
	return res, err
}

// interrupted reports whether the caller's context ended; the step then
// stays Running in the journal and the next runner resumes it.
func interrupted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("nodeexec: interrupted: %w", err)
	}
	return nil
}

func (s *session) step(ctx context.Context, i int) error {
	st := s.plan.Steps[i]
	rec := &s.j.Steps[i]
	log := s.log.WithValues("step", st.Name)
	switch rec.State {
	case StepStateSucceeded, StepStateSkipped:
		log.Info("step already completed; not re-running", "state", rec.State)
		return nil
	case StepStateRunning:
		rec.Resumed++
		policy := st.EffectiveInterruptPolicy()
		log.Info("step was interrupted", "policy", policy, "resumed", rec.Resumed)
		if rec.Resumed > s.r.maxResumes {
			return s.stop(i, fmt.Sprintf("step interrupted %d times (limit %d)", rec.Resumed, s.r.maxResumes))
		}
		// Journal the resume before the check or rollback runs: if that
		// kills the runner too, the count must still grow toward the limit.
		if err := s.persist(); err != nil {
			return err
		}
		switch policy {
		case InterruptPolicyStop:
			return s.stop(i, "interrupted while running; the step is neither idempotent nor checkable")
		case InterruptPolicyCheck:
			res, err := s.exec(ctx, i, PhaseCheck, st.Check)
			if ierr := interrupted(ctx); ierr != nil {
				return ierr
			}
			if err == nil && res.ExitCode == 0 {
				rec.State, rec.Note, rec.Finished = StepStateSucceeded, "completed before the interruption (check passed)", s.r.clock.Now().UTC()
				log.Info("interrupted step had completed; check passed")
				return s.persist()
			}
			rec.Note = fmt.Sprintf("check after interruption: exit %d; running again", res.ExitCode)
		case InterruptPolicyRollback:
			if st.Backup == nil || rec.BackupTaken {
				res, err := s.runWithRetry(ctx, i, PhaseRollback, st.Rollback)
				if ierr := interrupted(ctx); ierr != nil {
					return ierr
				}
				if err != nil || res.ExitCode != 0 {
					return s.needsAttention(i, PhaseRollback, res, err, "rolling back the interrupted step failed")
				}
				rec.Note = "rolled back after interruption; running again"
			}
		case InterruptPolicyRerun:
			rec.Note = "interrupted; idempotent, running again"
		}
		if err := s.persist(); err != nil {
			return err
		}
	case StepStatePending:
		if len(st.Check) > 0 {
			res, err := s.exec(ctx, i, PhaseCheck, st.Check)
			if ierr := interrupted(ctx); ierr != nil {
				return ierr
			}
			if err == nil && res.ExitCode == 0 {
				rec.State, rec.Note, rec.Finished = StepStateSkipped, "already done (check passed)", s.r.clock.Now().UTC()
				log.Info("step skipped: check says already done")
				return s.persist()
			}
		}
	default:
		return &JournalError{Path: s.path, Err: ErrJournalCorrupt, Detail: fmt.Sprintf("step %q is %s while the plan is %s", st.Name, rec.State, s.j.State)}
	}

	if st.Backup != nil && !rec.BackupTaken {
		res, err := s.exec(ctx, i, PhaseBackup, st.Backup)
		if ierr := interrupted(ctx); ierr != nil {
			return ierr
		}
		if err != nil || res.ExitCode != 0 {
			rec.State = StepStateFailed
			return s.fail(ctx, i, PhaseBackup, res, err)
		}
		rec.BackupTaken = true
		if err := s.persist(); err != nil {
			return err
		}
	}

	attempts := st.Retry.attempts()
	for n := 1; ; n++ {
		// Never journal an attempt that cannot start: a step marked
		// Running but never run would be treated as interrupted next time.
		if err := interrupted(ctx); err != nil {
			return err
		}
		rec.State, rec.Started = StepStateRunning, s.r.clock.Now().UTC()
		rec.Attempts++
		if err := s.persist(); err != nil { // journaled before the command starts
			return err
		}
		log.Info("running step", "attempt", n, "of", attempts)
		res, err := s.exec(ctx, i, PhaseRun, st.Argv)
		if ierr := interrupted(ctx); ierr != nil {
			return ierr
		}
		rec.ExitCode, rec.Output, rec.Finished = res.ExitCode, s.tail(res.Output), s.r.clock.Now().UTC()
		if err == nil && res.ExitCode == 0 {
			rec.State, rec.Note = StepStateSucceeded, ""
			log.Info("step succeeded", "duration", res.Duration)
			return s.persist()
		}
		if n >= attempts {
			rec.State = StepStateFailed
			return s.fail(ctx, i, PhaseRun, res, err)
		}
		wait := st.Retry.delay(n)
		rec.Note = fmt.Sprintf("attempt %d failed (exit %d%s); retrying in %v", n, res.ExitCode, errSuffix(err), wait)
		log.Info("step attempt failed; retrying", "attempt", n, "exitCode", res.ExitCode, "wait", wait, "error", errString(err))
		if err := s.persist(); err != nil {
			return err
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return interrupted(ctx)
			case <-s.r.clock.After(wait):
			}
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// runWithRetry runs argv with the step's retry budget (used for rollbacks).
func (s *session) runWithRetry(ctx context.Context, i int, phase Phase, argv []string) (Result, error) {
	st := s.plan.Steps[i]
	var res Result
	var err error
	for n := 1; n <= st.Retry.attempts(); n++ {
		res, err = s.exec(ctx, i, phase, argv)
		if ctx.Err() != nil || (err == nil && res.ExitCode == 0) {
			return res, err
		}
		if wait := st.Retry.delay(n); wait > 0 && n < st.Retry.attempts() {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-s.r.clock.After(wait):
			}
		}
	}
	return res, err
}

func (s *session) failure(i int, phase Phase, res Result, err error) *Failure {
	return &Failure{
		Step:     s.plan.Steps[i].Name,
		Phase:    phase,
		ExitCode: res.ExitCode,
		Output:   s.tail(res.Output),
		Error:    errString(err),
		Attempts: s.j.Steps[i].Attempts,
	}
}

// fail records a step that exhausted its budget and either ends the plan
// in PlanStateFailed or rolls it back.
func (s *session) fail(ctx context.Context, i int, phase Phase, res Result, err error) error {
	s.j.Failure = s.failure(i, phase, res, err)
	s.log.Info("step failed", "step", s.plan.Steps[i].Name, "phase", phase, "exitCode", res.ExitCode, "error", errString(err))
	if !s.plan.RollbackOnFailure {
		s.j.State = PlanStateFailed
		return s.persist()
	}
	s.j.State = PlanStateRollingBack
	if err := s.persist(); err != nil {
		return err
	}
	return s.rollback(ctx)
}

func (s *session) stop(i int, why string) error {
	rec := s.j.Steps[i]
	s.j.State = PlanStateNeedsAttention
	s.j.Failure = &Failure{Step: rec.Name, Phase: PhaseRun, ExitCode: rec.ExitCode, Output: rec.Output, Error: why, Attempts: rec.Attempts}
	s.log.Info("plan needs attention", "step", rec.Name, "reason", why)
	return s.persist()
}

func (s *session) needsAttention(i int, phase Phase, res Result, err error, why string) error {
	f := s.failure(i, phase, res, err)
	f.Error = strings.TrimSuffix(why+": "+f.Error, ": ")
	s.j.State, s.j.Failure = PlanStateNeedsAttention, f
	s.log.Info("plan needs attention", "step", f.Step, "reason", f.Error)
	return s.persist()
}

// rollbackBlocked ends a rollback at step k, which completed, cannot be
// undone and did not declare NothingToUndo: rolling back the steps before
// it would run old components under what it changed.
func (s *session) rollbackBlocked(k int, orig *Failure) error {
	rec := &s.j.Steps[k]
	why := fmt.Sprintf("rollback stopped at step %q: it completed and has no rollback argv, so the steps before it were left as they are (undoing them would put old components under what it changed)", rec.Name)
	switch {
	case s.requestedFrom != "":
		why += fmt.Sprintf("; the rollback was requested while the plan was %s", s.requestedFrom)
	case orig != nil:
		why += fmt.Sprintf("; the plan was rolling back because step %q failed (exit %d)", orig.Step, orig.ExitCode)
	}
	rec.Note = "completed and cannot be undone; rollback stopped here"
	s.j.State = PlanStateNeedsAttention
	s.j.Failure = &Failure{Step: rec.Name, Phase: PhaseRollback, ExitCode: rec.ExitCode, Output: rec.Output, Error: why, Attempts: rec.Attempts}
	s.log.Info("plan needs attention", "step", rec.Name, "reason", why)
	return s.persist()
}

// rollback undoes, in reverse order, every step that ran and has a
// rollback argv (and whose backup, if it declares one, was taken). It
// stops in PlanStateNeedsAttention at the first completed step that has no
// rollback argv and does not declare NothingToUndo. Steps
// already RolledBack are not undone twice; a step found RollingBack (the
// runner died mid-rollback) is rolled back again, so rollback argvs must be
// idempotent (restoring a backup is).
func (s *session) rollback(ctx context.Context) error {
	orig := s.j.Failure
	for k := len(s.plan.Steps) - 1; k >= 0; k-- {
		st, rec := s.plan.Steps[k], &s.j.Steps[k]
		switch rec.State {
		case StepStateSucceeded, StepStateFailed, StepStateRollingBack:
		default:
			continue
		}
		if len(st.Rollback) == 0 {
			if rec.State == StepStateSucceeded && !st.NothingToUndo {
				return s.rollbackBlocked(k, orig)
			}
			rec.Note = "no rollback argv; left as is"
			continue
		}
		if st.Backup != nil && !rec.BackupTaken {
			rec.Note = "backup was never taken; nothing to restore"
			continue
		}
		rec.State = StepStateRollingBack
		if err := s.persist(); err != nil {
			return err
		}
		s.log.Info("rolling back step", "step", st.Name)
		res, err := s.runWithRetry(ctx, k, PhaseRollback, st.Rollback)
		if ierr := interrupted(ctx); ierr != nil {
			return ierr
		}
		if err != nil || res.ExitCode != 0 {
			why := "rollback failed"
			switch {
			case s.requestedFrom != "":
				why = fmt.Sprintf("requested rollback of the %s plan failed", s.requestedFrom)
			case orig != nil:
				why = fmt.Sprintf("rollback failed after step %q failed (exit %d)", orig.Step, orig.ExitCode)
			}
			return s.needsAttention(k, PhaseRollback, res, err, why)
		}
		rec.State, rec.Note, rec.RolledBack = StepStateRolledBack, "", s.r.clock.Now().UTC()
		if err := s.persist(); err != nil {
			return err
		}
	}
	s.j.State = PlanStateRolledBack
	return s.persist()
}
