package nodeexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// Phase says which of a step's argvs a Command runs.
type Phase string

// Phases of a step.
const (
	PhaseRun      Phase = "run"
	PhaseCheck    Phase = "check"
	PhaseBackup   Phase = "backup"
	PhaseRollback Phase = "rollback"
)

// Target is the process whose namespaces a command enters.
type Target struct {
	// PID of the target process (1 for the host's init when the pod has
	// hostPID).
	PID int
	// Namespaces to enter, in canonical order.
	Namespaces []Namespace
}

// Command is one program execution requested by the Runner.
type Command struct {
	// Step and Phase identify the request (for logs and simulated hosts).
	Step  string
	Phase Phase
	// Argv is the program and its arguments; never a shell string.
	Argv []string
	// Env is KEY=VALUE pairs added to the executor's base environment.
	Env []string
	// Target, when non-nil, is entered with nsenter before running Argv;
	// nil runs Argv in the executor's own namespaces.
	Target *Target
}

// Result is the outcome of a Command that ran.
type Result struct {
	// ExitCode is the program's exit status, or -1 if it was killed by a
	// signal (for example at its deadline).
	ExitCode int
	// Output is the tail of combined stdout and stderr, bounded by the
	// executor's limit.
	Output []byte
	// Truncated reports that earlier output was dropped.
	Truncated bool
	// Duration is the wall time of the run.
	Duration time.Duration
}

// Executor runs commands. Run returns a nil error when the program ran to
// completion, whatever its exit code; a non-nil error means it could not be
// started or was stopped because ctx ended (the error then wraps
// ctx.Err()). Simulated hosts implement Executor to run whole plans in
// tests.
type Executor interface {
	Run(ctx context.Context, cmd Command) (Result, error)
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, cmd Command) (Result, error)

// Run calls f; a nil f is an ErrInvalidOption error and runs nothing.
func (f ExecutorFunc) Run(ctx context.Context, cmd Command) (Result, error) {
	if f == nil {
		return Result{}, fmt.Errorf("nodeexec: %w: nil ExecutorFunc", ErrInvalidOption)
	}
	return f(ctx, cmd)
}

// DefaultPath is the PATH given to commands when OSExecutor.BaseEnv is nil.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultOutputLimit is the number of output bytes OSExecutor keeps.
const defaultOutputLimit = 64 << 10

// OSExecutor runs commands with os/exec, from argv slices only. Commands
// with a Target are wrapped in nsenter (see NsenterArgv). On context end the
// whole process group is killed. The zero value is ready to use.
type OSExecutor struct {
	// NsenterPath is the nsenter binary; empty means "nsenter" looked up
	// on the runner's PATH.
	NsenterPath string
	// OutputLimit is how many trailing output bytes Result keeps; zero
	// means 64 KiB.
	OutputLimit int
	// BaseEnv is the environment every command starts from; nil means
	// just DefaultPath. The runner's own environment is never inherited,
	// so credentials in it do not leak into host commands.
	BaseEnv []string
	// Tee, when set, also receives the live output (for pod logs).
	Tee io.Writer
	// WaitDelay bounds how long Run waits for output pipes after the
	// process exits or is killed; zero means 5 seconds.
	WaitDelay time.Duration
	// KillGrace is how long a cancelled command (the step's deadline, or
	// the runner's context ended) has between SIGTERM and SIGKILL to its
	// process group; zero means 10 seconds.
	KillGrace time.Duration
}

// defaultKillGrace is OSExecutor's default KillGrace: short enough that a
// runner whose pod is deleted still journals the interruption within the
// upgrader pod's termination grace period (30 seconds).
const defaultKillGrace = 10 * time.Second

// NsenterArgv returns the argv that runs argv inside the namespaces of
// target through nsenter: nsenter --target PID --mount ... -- argv...
func NsenterArgv(nsenter string, target Target, argv []string) []string {
	out := make([]string, 0, 4+len(target.Namespaces)+len(argv))
	out = append(out, nsenter, "--target", strconv.Itoa(target.PID))
	for _, n := range target.Namespaces {
		out = append(out, "--"+string(n))
	}
	out = append(out, "--")
	return append(out, argv...)
}

// Run implements Executor. An empty argv is a *ValidationError (field
// "argv") and runs nothing.
func (e OSExecutor) Run(ctx context.Context, c Command) (Result, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return Result{ExitCode: -1}, &ValidationError{Field: "argv", Err: errEmptyArgv, Detail: fmt.Sprintf("step %q (%s)", c.Step, c.Phase)}
	}
	argv := c.Argv
	if c.Target != nil {
		ns := e.NsenterPath
		if ns == "" {
			ns = "nsenter"
		}
		argv = NsenterArgv(ns, *c.Target, c.Argv)
	}
	limit := e.OutputLimit
	if limit <= 0 {
		limit = defaultOutputLimit
	}
	out := &tailBuffer{limit: limit}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	env := e.BaseEnv
	if env == nil {
		env = []string{DefaultPath}
	}
	cmd.Env = append(append([]string(nil), env...), c.Env...)
	var w io.Writer = out
	if e.Tee != nil {
		w = io.MultiWriter(out, e.Tee)
	}
	cmd.Stdout = w
	cmd.Stderr = w
	grace := e.KillGrace
	if grace <= 0 {
		grace = defaultKillGrace
	}
	exited := make(chan struct{})
	setProcessGroup(cmd, grace, exited)
	cmd.WaitDelay = e.WaitDelay
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	// Go kills the process itself WaitDelay after Cancel: not before the
	// grace is over.
	cmd.WaitDelay += grace
	start := time.Now()
	err := cmd.Run()
	close(exited)
	res := Result{ExitCode: -1, Duration: time.Since(start)}
	res.Output, res.Truncated = out.bytes()
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	if ctxErr := ctx.Err(); ctxErr != nil && err != nil {
		return res, fmt.Errorf("nodeexec: step %q %s: %w", c.Step, c.Phase, ctxErr)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return res, fmt.Errorf("nodeexec: step %q %s: start %q: %w", c.Step, c.Phase, argv[0], err)
	}
	return res, nil
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	mu        sync.Mutex
	buf       []byte
	limit     int
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		t.truncated = true
		return n, nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.limit { // compact rarely: amortised O(1) per byte
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
		t.truncated = true
	}
	return n, nil
}

func (t *tailBuffer) bytes() ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	trunc := t.truncated
	if len(b) > t.limit {
		b = b[len(b)-t.limit:]
		trunc = true
	}
	return bytes.Clone(b), trunc
}
