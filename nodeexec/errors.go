package nodeexec

import (
	"errors"
	"fmt"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Sentinel errors. Every error this package returns wraps one of them, so
// callers can branch with errors.Is without parsing messages.
var (
	// ErrInvalidPlan is wrapped by every *ValidationError; its Field
	// names what is wrong.
	ErrInvalidPlan = errors.New("invalid plan")
	// ErrMalformed: encoded input (a plan for DecodePlan or FromEnv, a
	// summary for ParseSummary) is not valid JSON of the expected shape:
	// syntax errors, unknown fields, trailing data, missing names.
	ErrMalformed = errors.New("malformed input")
	// ErrInvalidOption: a RunnerOptions field or runner environment
	// variable has an unusable value (a nil Executor, a negative
	// TargetPID, JournalOutputLimit or MaxResumes, a target PID < 1 in
	// the environment); the message names it.
	ErrInvalidOption = errors.New("invalid option")

	// ErrJournalCorrupt: the journal file exists but cannot be decoded or
	// is internally inconsistent. Nothing is run and the file is left
	// untouched for inspection.
	ErrJournalCorrupt = errors.New("journal is corrupt")
	// ErrJournalMismatch: the journal file belongs to a different plan
	// (other name or fingerprint). Nothing is run and the file is left
	// untouched.
	ErrJournalMismatch = errors.New("journal belongs to a different plan")
	// ErrJournalLocked: another runner holds the journal's lock.
	ErrJournalLocked = errors.New("journal is locked by another runner")
	// ErrNoJournal: Runner.Rollback found no journal for the plan, so
	// nothing of it ran there and there is nothing to undo. Errors wrapping
	// it also satisfy errors.Is(err, fs.ErrNotExist).
	ErrNoJournal = errors.New("no journal for the plan")

	// ErrStepFailed: the plan ended in PlanStateFailed.
	ErrStepFailed = errors.New("step failed")
	// ErrRolledBack: a step failed and the plan was rolled back.
	ErrRolledBack = errors.New("plan rolled back")
	// ErrNeedsAttention: the runner stopped because it cannot continue
	// safely (an interrupted non-idempotent step, or a failed rollback).
	ErrNeedsAttention = errors.New("plan needs attention")
)

// What is wrong with a field of a plan: the Err of a *ValidationError.
// Callers tell problems apart by ValidationError.Field.
var (
	// errEmptyArgv: an argv (step, check, backup or rollback) is empty or
	// its program name is the empty string.
	errEmptyArgv = errors.New("empty argv")
	// errInvalidArgv: an argv element contains a NUL byte, which no
	// program can receive.
	errInvalidArgv = errors.New("argv element contains a NUL byte")
	// errUnknownNamespace: a namespace name is not one of mount, uts, ipc,
	// net, pid.
	errUnknownNamespace = errors.New("unknown namespace")
	// errNegativeDuration: a timeout or backoff is negative, or a retry
	// budget is negative.
	errNegativeDuration = errors.New("negative duration or count")
	// errInvalidName: a plan, node or step name is not a valid DNS-1123
	// label (step names become container names and journal keys).
	errInvalidName = errors.New("invalid name")
	// errDuplicateStep: two steps share a name.
	errDuplicateStep = errors.New("duplicate step name")
	// errNoSteps: a plan has no steps.
	errNoSteps = errors.New("plan has no steps")
	// errInvalidEnv: an environment variable name is empty or contains
	// '=' or NUL, or its value contains NUL.
	errInvalidEnv = errors.New("invalid environment variable")
	// errInvalidPolicy: an interrupt policy is unknown or asks for
	// something the step does not provide (Check without a check argv,
	// Rollback without a rollback argv).
	errInvalidPolicy = errors.New("invalid interrupt policy")
	// errConflictingFields: two fields that exclude each other are both
	// set (for example InContainer together with Namespaces).
	errConflictingFields = errors.New("conflicting fields")
)

// ValidationError describes one invalid field of a Plan. Field is a path
// such as "steps[2].argv" or "steps[kubeadm].timeout"; Err says what is
// wrong with it (an empty argv, a negative duration, ...) and Detail
// shows the value.
type ValidationError struct {
	Field  string
	Detail string
	Err    error
}

// Error implements error.
func (e *ValidationError) Error() string {
	if e.Detail == "" {
		return errtext.Cap(fmt.Sprintf("nodeexec: invalid plan: %s: %v", e.Field, e.Err))
	}
	return errtext.Cap(fmt.Sprintf("nodeexec: invalid plan: %s: %v: %s", e.Field, e.Err, e.Detail))
}

// Unwrap makes errors.Is match both ErrInvalidPlan and Err.
func (e *ValidationError) Unwrap() []error { return []error{ErrInvalidPlan, e.Err} }

// JournalError reports a journal file that cannot be used.
type JournalError struct {
	Path   string
	Detail string
	Err    error
}

// Error implements error.
func (e *JournalError) Error() string {
	if e.Detail == "" {
		return errtext.Cap(fmt.Sprintf("nodeexec: journal %s: %v", e.Path, e.Err))
	}
	return errtext.Cap(fmt.Sprintf("nodeexec: journal %s: %v: %s", e.Path, e.Err, e.Detail))
}

// Unwrap returns the sentinel (ErrJournalCorrupt, ErrJournalMismatch,
// ErrJournalLocked, ErrNoJournal) or the underlying I/O error.
func (e *JournalError) Unwrap() error { return e.Err }

// PlanError is returned by Runner.Run when a plan reaches a terminal state
// other than PlanStateSucceeded. It unwraps to ErrStepFailed, ErrRolledBack or
// ErrNeedsAttention.
type PlanError struct {
	Plan    string
	State   PlanState
	Failure Failure
}

// Error implements error.
func (e *PlanError) Error() string {
	f := e.Failure
	msg := fmt.Sprintf("nodeexec: plan %q %s: step %q (%s) exit code %d", e.Plan, e.State, f.Step, f.Phase, f.ExitCode)
	if f.Error != "" {
		msg += ": " + f.Error
	}
	return errtext.Cap(msg)
}

// Unwrap maps the terminal state to its sentinel.
func (e *PlanError) Unwrap() error {
	switch e.State {
	case PlanStateRolledBack:
		return ErrRolledBack
	case PlanStateNeedsAttention:
		return ErrNeedsAttention
	default:
		return ErrStepFailed
	}
}
