package nodeexec

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"k8s.io/utils/clock"
)

// DefaultJournalDir is where the runner keeps journals when no directory
// is configured. The pod builder mounts the staging hostPath there, so the
// journal lives on the host and survives pod restarts.
const DefaultJournalDir = "/var/lib/upgradekit/journal"

// Defaults of RunnerOptions fields whose zero value stands for them.
const (
	defaultJournalOutputLimit = 4096
	defaultMaxResumes         = 3
)

// RunnerOptions configures a Runner. The zero value of every field selects
// its default, so RunnerOptions{} is a runner that journals in
// DefaultJournalDir and enters the namespaces of PID 1.
type RunnerOptions struct {
	// JournalDir holds the journals (created 0700 if missing). Default
	// DefaultJournalDir; unused, and an error to set, with JournalStore.
	JournalDir string

	// JournalStore, when set, keeps the journals instead of the files in
	// JournalDir (MemoryJournalStore for runners whose crashes are
	// simulated in process). Default FileJournalStore{Dir: JournalDir}.
	JournalStore JournalStore

	// TargetPID is the process whose namespaces steps enter. Default 1
	// (the host's init, visible when the pod runs with hostPID); negative
	// is an error.
	TargetPID int

	// Direct runs every step without nsenter, for a runner that already
	// runs on the host (a systemd unit, an SSH session, tests). Default
	// false.
	Direct bool

	// Logger receives the runner's logs. Default (the zero logr.Logger)
	// discards them.
	Logger logr.Logger

	// Clock is used for backoff waits and journal timestamps. Default
	// clock.RealClock{}.
	Clock clock.Clock

	// JournalOutputLimit is how many trailing output bytes of each step
	// the journal keeps (the full bounded output is in the Executor's
	// Result and the logs). Default 4096; negative is an error.
	JournalOutputLimit int

	// MaxResumes bounds how often one step may be found interrupted
	// before the plan stops in PlanStateNeedsAttention, so a step that
	// kills its own runner (for example by restarting the container
	// runtime the pod runs on) cannot loop forever. Default 3; negative
	// is an error.
	MaxResumes int

	// Progress, when set, is called with a copy of the outcome after
	// every journal write (for status reporting). Default none.
	Progress func(Outcome)

	// StopAfter, when set, makes Run return after the named step
	// completes, leaving the plan Running in the journal (Run returns a
	// nil error and the non-terminal outcome). The pod builder uses it
	// to give every step its own init container while keeping the
	// journal's guarantees: each container runs the plan up to its step,
	// skipping what earlier ones completed. Default: run the whole plan.
	StopAfter string

	// SummaryFile, when set, is rewritten with Summarize(outcome) after
	// every journal write. Pointed at the container's termination
	// message path (/dev/termination-log), it lets the pod status show
	// the last known progress even after the runner was killed. Errors
	// writing the file are logged, never fatal: the journal is the
	// record, the summary a view. Default none.
	SummaryFile string

	// SoftStop, when set, makes Run stop before starting the next step
	// once SoftStop is done, while the step under way (and a rollback
	// under way) keeps running under Run's own context. Run then returns
	// an error wrapping context.Canceled, the plan stays Running in the
	// journal, and the next Run continues with the step that did not
	// start. A runner in a pod wires SIGTERM to SoftStop and cancels
	// Run's context only after a grace period, so that pod deletion does
	// not kill `kubeadm upgrade apply` mid-way when it could finish.
	// Default none.
	SoftStop context.Context
}

// withDefaults returns o with every zero field set to its default, or an
// error wrapping ErrInvalidOption that names the first unusable field.
func (o RunnerOptions) withDefaults() (RunnerOptions, error) {
	if o.JournalStore != nil && o.JournalDir != "" {
		return o, fmt.Errorf("nodeexec: RunnerOptions.JournalDir: %s is set with JournalStore, which keeps the journals instead: %w", errtext.Quote(o.JournalDir), ErrInvalidOption)
	}
	if o.JournalDir == "" && o.JournalStore == nil {
		o.JournalDir = DefaultJournalDir
	}
	if o.TargetPID == 0 {
		o.TargetPID = 1
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.JournalOutputLimit == 0 {
		o.JournalOutputLimit = defaultJournalOutputLimit
	}
	if o.MaxResumes == 0 {
		o.MaxResumes = defaultMaxResumes
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"TargetPID", o.TargetPID}, {"JournalOutputLimit", o.JournalOutputLimit}, {"MaxResumes", o.MaxResumes}} {
		if f.v < 0 {
			return o, fmt.Errorf("nodeexec: RunnerOptions.%s: %d is negative: %w", f.name, f.v, ErrInvalidOption)
		}
	}
	return o, nil
}
