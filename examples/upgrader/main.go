// Command upgrader is the node-side binary of the upgrader image. It runs a
// nodeexec plan on the node's host (through nsenter into PID 1's
// namespaces) with nodeexec's crash-safe journal, reports what the journal
// says, and rolls a plan back when an operator asks.
//
//	upgrader run      [flags]           run the plan, or resume it from its journal
//	upgrader status   [flags] [PLAN...] print the journaled state of plans
//	upgrader rollback [flags]           undo the completed steps of the plan
//	upgrader reset    [flags] PLAN...   delete plans' journals so they can run again
//
// In the upgrader pod built by package nodepod with
// nodepod.WithRunnerCommand("/upgrader", "run"), everything comes from the
// environment the pod sets (UPGRADEKIT_PLAN, UPGRADEKIT_JOURNAL_DIR,
// UPGRADEKIT_TARGET_PID, UPGRADEKIT_NSENTER, UPGRADEKIT_STOP_AFTER,
// UPGRADEKIT_SUMMARY_FILE; see nodeexec.FromEnv). Flags override it for
// hand use on a node: --plan FILE reads the plan from a file, --direct runs
// the steps without nsenter (the process already runs on the host).
//
// Exit codes, the same for every command:
//
//	0  the command did what it was asked: run: the plan Succeeded (or
//	   stopped after the --stop-after step); rollback: the plan is
//	   RolledBack; status: every plan shown Succeeded; reset: the
//	   journals are gone
//	1  error: unreadable or invalid plan, journal missing, locked by a
//	   running runner, corrupt or written for another plan
//	2  usage: unknown command, bad flag or argument
//	3  Running or RollingBack: interrupted by SIGTERM/SIGINT (run it again
//	   to resume), or, for status, still in progress or its runner died.
//	   A signal stops the run between steps; the step under way gets 15
//	   seconds to finish before its processes get SIGTERM, then SIGKILL
//	   10 seconds later
//	4  RolledBack (run, status)
//	5  Failed
//	6  NeedsAttention
//
// status with several plans exits with the largest of their codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/upgradekit/upgradekit/examples/buildinfo"
	"github.com/upgradekit/upgradekit/examples/cli"
	"github.com/upgradekit/upgradekit/nodeexec"
)

// Exit codes; see the package documentation.
const (
	exitOK             = 0
	exitError          = 1
	exitUsage          = 2
	exitInProgress     = 3
	exitRolledBack     = 4
	exitFailed         = 5
	exitNeedsAttention = 6
)

// stateCode is the exit code that reports a plan state.
func stateCode(s nodeexec.PlanState) int {
	switch s {
	case nodeexec.PlanStateSucceeded:
		return exitOK
	case nodeexec.PlanStateRolledBack:
		return exitRolledBack
	case nodeexec.PlanStateFailed:
		return exitFailed
	case nodeexec.PlanStateNeedsAttention:
		return exitNeedsAttention
	default:
		return exitInProgress
	}
}

const usage = `usage:
  upgrader run      [--plan FILE] [--direct] [--journal-dir DIR] [--stop-after STEP] [flags]
  upgrader status   [--journal-dir DIR | --journal FILE] [-o text|json|yaml] [--tail N] [PLAN...]
  upgrader rollback [--plan FILE] [--direct] [--journal-dir DIR] [flags]
  upgrader reset    [--journal-dir DIR] PLAN...
  upgrader version
exit: 0 done, 1 error, 2 usage, 3 in progress, 4 rolled back, 5 failed, 6 needs attention
Run "upgrader COMMAND --help" for a command's flags. The plan and settings
default to the UPGRADEKIT_* environment the upgrader pod sets.`

func main() {
	// SIGTERM (pod deletion) and SIGINT cancel the context: the runner
	// starts no further step and gives the one under way --stop-grace to end
	// before it stops its process group (SIGTERM, then SIGKILL); a step
	// stopped that way stays Running in the journal, so the next run
	// resumes it per its interrupt policy.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() { <-ctx.Done(); stop() }() // a second signal kills at once
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole command; getenv stands for os.Getenv.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usagef(stderr, "upgrader", "name a command (run, rollback, status, reset, version)")
	}
	switch args[0] {
	case "run", "rollback":
		return runPlan(ctx, args[0], args[1:], getenv, stdout, stderr)
	case "status":
		return status(args[1:], getenv, stdout, stderr)
	case "reset":
		return reset(args[1:], getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.Version("upgrader"))
		return exitOK
	default:
		return usagef(stderr, "upgrader", "unknown command %q (run, rollback, status, reset, version)", args[0])
	}
}

// defaultStopGrace is how long the step under way may go on after
// SIGTERM (--stop-grace).
const defaultStopGrace = 15 * time.Second

// runPlan is "run" and "rollback": both need the plan and a runner.
func runPlan(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("upgrader " + cmd)
	fs.Usage = func() { cli.WriteHelp(stderr, fs, "usage: upgrader "+cmd+" [flags]") }
	planFile := fs.String("plan", "", "plan file (JSON, as nodeexec.EncodePlan writes it); default $"+nodeexec.EnvPlan)
	direct := fs.Bool("direct", false, "run steps without nsenter, in this process's namespaces (on the host itself, or tests)")
	grace := fs.Duration("stop-grace", defaultStopGrace, "after SIGTERM/SIGINT, how long the step under way may go on before its processes are stopped (no new step starts); keep it and 10s under the pod's termination grace period")
	// Every other flag overrides the environment variable of the same
	// meaning, so FromEnv stays the one parser of the runner settings.
	env := map[string]*string{
		nodeexec.EnvJournalDir:  fs.String("journal-dir", "", "journal directory; default $"+nodeexec.EnvJournalDir+" or "+nodeexec.DefaultJournalDir),
		nodeexec.EnvTargetPID:   fs.String("target-pid", "", "PID whose namespaces steps enter; default $"+nodeexec.EnvTargetPID+" or 1"),
		nodeexec.EnvNsenter:     fs.String("nsenter", "", "nsenter binary; default $"+nodeexec.EnvNsenter+" or nsenter on PATH"),
		nodeexec.EnvSummaryFile: fs.String("summary-file", "", "file rewritten with a compact summary after every journal write; default $"+nodeexec.EnvSummaryFile),
	}
	if cmd == "run" {
		env[nodeexec.EnvStopAfter] = fs.String("stop-after", "", "return after this step completes; default $"+nodeexec.EnvStopAfter)
	}
	if err := cli.Parse(fs, args); err != nil {
		return usageError(stderr, "upgrader "+cmd, err)
	}
	if fs.NArg() > 0 {
		return usagef(stderr, "upgrader "+cmd, "unexpected arguments %q", fs.Args())
	}
	if *grace < 0 {
		return usagef(stderr, "upgrader "+cmd, "--stop-grace %s: must not be negative", *grace)
	}
	if *planFile != "" {
		data, err := os.ReadFile(*planFile)
		if err == nil {
			_, err = nodeexec.DecodePlan(data) // for an error that names the file
		}
		if err != nil {
			fmt.Fprintf(stderr, "upgrader %s: plan %s: %v\n", cmd, *planFile, err)
			return exitError
		}
		env[nodeexec.EnvPlan] = ptr(string(data))
	}
	cfg, err := nodeexec.FromEnv(func(k string) string {
		if v := env[k]; v != nil && *v != "" {
			return *v
		}
		return getenv(k)
	})
	if errors.Is(err, nodeexec.ErrMissingEnv) {
		err = fmt.Errorf("%w (give --plan FILE or set $%s)", err, nodeexec.EnvPlan)
	}
	if err != nil {
		fmt.Fprintf(stderr, "upgrader %s: %v\n", cmd, err)
		return exitError
	}

	executor := cfg.Executor()
	executor.Tee = stderr // live step output, for pod logs
	p := &progress{w: stdout}
	opts := cfg.RunnerOptions()
	opts.Progress, opts.Direct = p.update, *direct
	if cmd == "run" {
		opts.SoftStop = ctx // see --stop-grace below
	}
	runner, err := nodeexec.NewRunner(executor, opts)
	if err != nil {
		fmt.Fprintf(stderr, "upgrader %s: %v\n", cmd, err)
		return exitError
	}
	plan := cfg.Plan
	journal, err := runner.JournalPath(plan.Name)
	if err != nil {
		fmt.Fprintf(stderr, "upgrader %s: %v\n", cmd, err)
		return exitError
	}
	fmt.Fprintf(stdout, "upgrader: %s plan %s on node %s (%d steps), journal %s\n", cmd, plan.Name, plan.Node, len(plan.Steps), journal)

	// ctx ends at SIGTERM (pod deletion): no new step starts, and the step
	// or rollback under way has --stop-grace to finish before it is stopped
	// (SIGTERM to its process group, SIGKILL OSExecutor.KillGrace, 10s by default,
	// later), all within the pod's 30-second termination grace period.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	go func() {
		select {
		case <-ctx.Done():
		case <-hard.Done():
			return
		}
		t := time.NewTimer(*grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancelHard()
		case <-hard.Done():
		}
	}()
	var out nodeexec.Outcome
	if cmd == "run" {
		out, err = runner.Run(hard, plan)
	} else {
		out, err = runner.Rollback(hard, plan)
	}
	return report(cmd, out, err, p.last != nil, stdout, stderr)
}

// report prints the final line of run or rollback and picks the exit code.
// ran is false when the runner found the plan finished and ran nothing.
func report(cmd string, out nodeexec.Outcome, err error, ran bool, stdout, stderr io.Writer) int {
	var planErr *nodeexec.PlanError
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stdout, "upgrader: interrupted; the journal records where: run the same command again to resume\n")
		return exitInProgress
	case err != nil && !errors.As(err, &planErr):
		fmt.Fprintf(stderr, "upgrader %s: %v\n", cmd, err)
		return exitError
	}
	if !ran {
		fmt.Fprintf(stdout, "upgrader: nothing to do: the journal says the plan is already %s\n", out.State)
	}
	fmt.Fprintf(stdout, "upgrader: plan %s %s\n", out.Plan, out.State)
	if f := out.Failure; f != nil && out.State != nodeexec.PlanStateSucceeded {
		fmt.Fprintf(stdout, "upgrader: failure: step %q (%s) exit code %d after %d attempt(s)%s\n", f.Step, f.Phase, f.ExitCode, f.Attempts, suffix(": ", f.Error))
	}
	switch {
	case cmd == "rollback" && out.State == nodeexec.PlanStateRolledBack:
		return exitOK
	case cmd == "run" && out.State == nodeexec.PlanStateRunning: // stopped after --stop-after
		return exitOK
	}
	return stateCode(out.State)
}

// reset deletes the journals of the named plans (Runner.Reset: never the
// journal of a plan a runner is executing), so the next run starts over.
func reset(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	flags := cli.NewFlagSet("upgrader reset")
	flags.Usage = func() { cli.WriteHelp(stderr, flags, "usage: "+flags.Name()+" [flags]") }
	dir := flags.String("journal-dir", "", "journal directory; default $"+nodeexec.EnvJournalDir+" or "+nodeexec.DefaultJournalDir)
	if err := cli.Parse(flags, args); err != nil {
		return usageError(stderr, flags.Name(), err)
	}
	if flags.NArg() == 0 {
		return usagef(stderr, "upgrader reset", "name the plans whose journals to delete")
	}
	runner, err := nodeexec.NewRunner(nodeexec.OSExecutor{}, nodeexec.RunnerOptions{JournalDir: journalDir(*dir, getenv)})
	if err != nil {
		fmt.Fprintf(stderr, "upgrader reset: %v\n", err)
		return exitError
	}
	for _, plan := range flags.Args() {
		if err := nodeexec.CheckPlanName(plan); err != nil {
			return usagef(stderr, "upgrader reset", "%v", err)
		}
		journal, err := runner.JournalPath(plan) // checked above
		if err != nil {
			return usagef(stderr, "upgrader reset", "%v", err)
		}
		_, statErr := os.Stat(journal)
		if err := runner.Reset(plan); err != nil {
			fmt.Fprintf(stderr, "upgrader reset: %v\n", err)
			return exitError
		}
		if statErr != nil {
			fmt.Fprintf(stdout, "upgrader: plan %s has no journal; nothing to reset\n", plan)
			continue
		}
		fmt.Fprintf(stdout, "upgrader: journal of plan %s deleted: its next run starts from the first step\n", plan)
	}
	return exitOK
}

// journalDir is the --journal-dir flag, else $UPGRADEKIT_JOURNAL_DIR, else
// the default.
func journalDir(flagValue string, getenv func(string) string) string {
	for _, d := range []string{flagValue, getenv(nodeexec.EnvJournalDir)} {
		if d != "" {
			return d
		}
	}
	return nodeexec.DefaultJournalDir
}

// usageError maps a flag parsing error to an exit code, printing it as
// one line and the --help hint (the help itself for -h).
func usageError(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, cli.ErrHelp) {
		return exitOK
	}
	cli.PrintUsageError(stderr, cmd, err)
	return exitUsage
}

// usagef prints a usage error of cmd as one line and the --help hint.
func usagef(stderr io.Writer, cmd, format string, a ...any) int {
	cli.PrintUsageError(stderr, cmd, fmt.Errorf(format, a...))
	return exitUsage
}

func suffix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

func ptr[T any](v T) *T { return &v }
