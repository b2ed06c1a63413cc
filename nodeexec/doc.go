// Package nodeexec runs upgrade steps on a Kubernetes node's host, from a
// privileged pod through nsenter or directly, with a crash-safe journal.
//
// A Step is an argv (never a shell string; ShellArgv is the explicit,
// argument-safe opt-in), the host namespaces it enters, environment, a
// deadline, a retry budget with backoff, an idempotency contract
// (Idempotent, or a Check argv that says whether it is already done) and
// optional Backup and Rollback argvs. A Plan is the ordered steps for one
// node plus metadata; Validate reports every problem as a typed
// *ValidationError wrapping ErrInvalidPlan, whose Field names it.
//
// The Runner executes a plan through an Executor (OSExecutor uses os/exec
// with argv slices; simulated hosts implement the interface or use
// ExecutorFunc). Every state change is written to a journal file on the
// host (temporary file, fsync, rename, directory fsync) before the command
// it describes starts (a FileJournalStore; RunnerOptions.JournalStore
// takes another JournalStore, such as the MemoryJournalStore of simulated
// hosts). NewRunner takes a RunnerOptions struct whose zero value is the
// default (journals in DefaultJournalDir, namespaces of PID 1). After a
// crash or a pod restart, a new Runner:
//
//   - skips steps the journal records as completed (never re-running a
//     non-idempotent one),
//   - handles the step that was running per its InterruptPolicy: re-run
//     (idempotent), check then maybe re-run, roll back then re-run, or stop
//     in PlanStateNeedsAttention,
//   - keeps the backup taken before the first attempt instead of taking a
//     new one of half-upgraded state.
//
// Terminal states are explicit: PlanStateSucceeded, PlanStateFailed (with step,
// phase, exit code and output tail), PlanStateRolledBack (RollbackOnFailure:
// the failed and completed steps are undone in reverse order) and
// PlanStateNeedsAttention. A corrupt journal or one written for another plan is
// refused (ErrJournalCorrupt, ErrJournalMismatch) without running anything
// or touching the file.
//
// Runner.Rollback is the operator's rollback: it undoes a plan that ended
// Failed, NeedsAttention or Succeeded (or whose runner died mid-step) with
// the same journaled machinery as RollbackOnFailure (reverse order,
// NothingToUndo steps passed over, a stop in PlanStateNeedsAttention at a
// completed step that cannot be undone, resume after a crash, never twice).
// It refuses a plan whose runner holds the lock (ErrJournalLocked), a
// journal of another plan (ErrJournalMismatch) and a plan that never ran
// (ErrNoJournal). Reset deletes a journal so the plan can run again.
//
// Sub-packages: kubeadm (step library for kubeadm in-place upgrades),
// nodepod (the privileged pod and its status) and drain (owned cordon,
// PDB-respecting drain with diagnosis).
//
// What it is not: a scheduler of upgrades across nodes, or a remote
// execution system. The Runner is meant to run on (or in a pod on) the node
// it changes; nsenter needs Linux, root and the capabilities listed by
// RequiredCapabilities (the rest of the package builds everywhere).
package nodeexec
