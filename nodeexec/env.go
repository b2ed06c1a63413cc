package nodeexec

import (
	"errors"
	"fmt"
	"strconv"
)

// Environment variables through which the single-container upgrader pod
// (see package nodepod) hands the plan to the runner binary inside it.
const (
	// EnvPlan holds the plan as produced by EncodePlan.
	EnvPlan = "UPGRADEKIT_PLAN"
	// EnvJournalDir is the journal directory (on the staging hostPath).
	EnvJournalDir = "UPGRADEKIT_JOURNAL_DIR"
	// EnvTargetPID is the PID whose namespaces steps enter (default 1).
	EnvTargetPID = "UPGRADEKIT_TARGET_PID"
	// EnvNsenter is the nsenter binary inside the image (default "nsenter").
	EnvNsenter = "UPGRADEKIT_NSENTER"
	// EnvStopAfter names the step after which the runner returns (see
	// RunnerOptions.StopAfter); empty runs the whole plan.
	EnvStopAfter = "UPGRADEKIT_STOP_AFTER"
	// EnvSummaryFile is where the runner keeps a Summary (the container's
	// termination message path, so the pod status carries progress).
	EnvSummaryFile = "UPGRADEKIT_SUMMARY_FILE"
)

// ErrMissingEnv is returned by FromEnv when EnvPlan is unset.
var ErrMissingEnv = errors.New("required environment variable is not set")

// EnvConfig is what FromEnv reads: the plan and the runner settings.
type EnvConfig struct {
	Plan       Plan
	JournalDir string
	TargetPID  int
	Nsenter    string
	StopAfter  string
	// SummaryFile, when set, receives Summarize(outcome) after every
	// journal write (see RunnerOptions.SummaryFile).
	SummaryFile string
}

// RunnerOptions returns the options matching the configuration; the
// caller may set the others (Logger, Progress, SoftStop, ...) on the result.
func (c EnvConfig) RunnerOptions() RunnerOptions {
	return RunnerOptions{JournalDir: c.JournalDir, TargetPID: c.TargetPID, StopAfter: c.StopAfter, SummaryFile: c.SummaryFile}
}

// Executor returns an OSExecutor using the configured nsenter.
func (c EnvConfig) Executor() OSExecutor { return OSExecutor{NsenterPath: c.Nsenter} }

// FromEnv reads the runner configuration from the environment through
// getenv (os.Getenv in the upgrader binary; a map lookup in tests). A
// minimal upgrader main is:
//
//	cfg, err := nodeexec.FromEnv(os.Getenv)
//	runner, err := nodeexec.NewRunner(cfg.Executor(), cfg.RunnerOptions())
//	outcome, err := runner.Run(ctx, cfg.Plan)
func FromEnv(getenv func(string) string) (EnvConfig, error) {
	if getenv == nil {
		return EnvConfig{}, fmt.Errorf("nodeexec: FromEnv: %w: nil getenv", ErrInvalidOption)
	}
	raw := getenv(EnvPlan)
	if raw == "" {
		return EnvConfig{}, fmt.Errorf("nodeexec: %s: %w", EnvPlan, ErrMissingEnv)
	}
	p, err := DecodePlan([]byte(raw))
	if err != nil {
		return EnvConfig{}, fmt.Errorf("nodeexec: %s: %w", EnvPlan, err)
	}
	c := EnvConfig{Plan: p, JournalDir: getenv(EnvJournalDir), TargetPID: 1, Nsenter: getenv(EnvNsenter), StopAfter: getenv(EnvStopAfter), SummaryFile: getenv(EnvSummaryFile)}
	if c.JournalDir == "" {
		c.JournalDir = DefaultJournalDir
	}
	if s := getenv(EnvTargetPID); s != "" {
		pid, err := strconv.Atoi(s)
		if err != nil || pid < 1 {
			return EnvConfig{}, fmt.Errorf("nodeexec: %s=%q: want a PID >= 1: %w", EnvTargetPID, s, ErrInvalidOption)
		}
		c.TargetPID = pid
	}
	return c, nil
}
