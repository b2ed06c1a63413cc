package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// envAsMain makes the test binary act as the upgrader binary (main, with
// its signal handling), for the tests that signal or kill a real process.
const envAsMain = "UPGRADER_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envAsMain) == "1" {
		os.Args = append([]string{"upgrader"}, os.Args[2:]...) // drop -test.run=^$
		main()
	}
	os.Exit(m.Run())
}

type result struct {
	code           int
	stdout, stderr string
}

// upgrader calls run in-process; env stands for the process environment.
func upgrader(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	t.Logf("upgrader %s -> exit %d\n--- stdout ---\n%s--- stderr ---\n%s", strings.Join(args, " "), code, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// ledgerPlan's steps append to a ledger file every time one of their
// commands really runs, so the ledger is independent evidence of what ran.
// failStep, when set, names a step whose run exits 3.
func ledgerPlan(ledger, failStep string) nodeexec.Plan {
	step := func(name string, rollback bool) nodeexec.Step {
		script := `echo "$2 ran" >> "$1"`
		if name == failStep {
			script += `; echo "$2 is broken" >&2; exit 3`
		}
		s := nodeexec.Step{Name: name, Argv: nodeexec.ShellArgv(script, ledger, name)}
		if rollback {
			s.Rollback = nodeexec.ShellArgv(`echo "$2 undone" >> "$1"`, ledger, name)
		} else {
			s.NothingToUndo = true
		}
		return s
	}
	return nodeexec.Plan{Name: "demo", Node: "node-a", Steps: []nodeexec.Step{
		step("one", true), step("two", true), step("restart", false),
	}}
}

// setup writes the plan to a file and returns it, the journal directory
// and a reader of the ledger.
func setup(t *testing.T, failStep string) (planFile, journalDir string, ledger func() string) {
	t.Helper()
	dir := t.TempDir()
	ledgerPath := filepath.Join(dir, "ledger")
	data, err := nodeexec.EncodePlan(ledgerPlan(ledgerPath, failStep))
	require.NoError(t, err)
	planFile = filepath.Join(dir, "plan.json")
	require.NoError(t, os.WriteFile(planFile, data, 0o600))
	return planFile, filepath.Join(dir, "journal"), func() string {
		b, err := os.ReadFile(ledgerPath)
		if os.IsNotExist(err) {
			return ""
		}
		require.NoError(t, err)
		return string(b)
	}
}

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

func TestRunSucceeds(t *testing.T) {
	plan, journal, ledger := setup(t, "")
	r := upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal)
	require.Equal(t, exitOK, r.code)
	want := []string{
		"upgrader: run plan demo on node node-a (3 steps), journal " + filepath.Join(journal, "demo.journal.json"),
		"[1/3] one: Running (attempt 1)",
		"[1/3] one: Succeeded (exit 0, 1 attempt(s))",
		"[2/3] two: Running (attempt 1)",
		"[2/3] two: Succeeded (exit 0, 1 attempt(s))",
		"[3/3] restart: Running (attempt 1)",
		"[3/3] restart: Succeeded (exit 0, 1 attempt(s))",
		"upgrader: plan demo Succeeded",
	}
	require.Empty(t, cmp.Diff(want, lines(r.stdout)))
	require.Equal(t, "one ran\ntwo ran\nrestart ran\n", ledger())

	// A finished plan is not run again.
	r = upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal)
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, "nothing to do: the journal says the plan is already Succeeded")
	require.Equal(t, "one ran\ntwo ran\nrestart ran\n", ledger())
}

func TestRunFails(t *testing.T) {
	plan, journal, ledger := setup(t, "two")
	r := upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stdout, "[2/3] two: Failed (exit 3, 1 attempt(s))\n")
	require.Contains(t, r.stdout, "upgrader: plan demo Failed\n")
	require.Contains(t, r.stdout, `upgrader: failure: step "two" (run) exit code 3 after 1 attempt(s)`)
	require.Contains(t, r.stderr, "two is broken", "step output goes to stderr live")
	require.Equal(t, "one ran\ntwo ran\n", ledger(), "nothing runs after the failed step")

	// Status: text and JSON, exit code 5 for Failed.
	r = upgrader(t, nil, "status", "-journal-dir", journal, "demo")
	require.Equal(t, exitFailed, r.code)
	got := regexp.MustCompile(`updated \S+`).ReplaceAllString(r.stdout, "updated T")
	var trimmed []string
	for _, l := range lines(got) {
		trimmed = append(trimmed, strings.TrimRight(l, " "))
	}
	want := []string{
		"plan demo  node node-a  state Failed  runs 1  updated T",
		"journal " + filepath.Join(journal, "demo.journal.json"),
		"STEP     STATE      ATTEMPTS  EXIT  BACKUP  NOTE",
		"one      Succeeded  1         0     -",
		"two      Failed     1         3     -",
		"restart  Pending    0         -     -",
		`failure: step "two" (run) exit code 3 after 1 attempt(s)`,
		"failure output (last 1 of 1 lines):",
		"  | two is broken",
		"output of two (last 1 of 1 lines):",
		"  | two is broken",
	}
	require.Empty(t, cmp.Diff(want, trimmed))

	path := filepath.Join(journal, "demo.journal.json")
	j, err := nodeexec.ReadJournal(path)
	require.NoError(t, err)
	for _, output := range []string{"-ojson", "--output=yaml"} {
		r = upgrader(t, nil, "status", "--journal-dir", journal, output)
		require.Equal(t, exitFailed, r.code)
		var list struct {
			APIVersion string       `json:"apiVersion"`
			Kind       string       `json:"kind"`
			Items      []statusJSON `json:"items"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(r.stdout), &list), r.stdout)
		require.Equal(t, "cli.upgradekit.io/v1alpha1", list.APIVersion)
		require.Equal(t, "JournalList", list.Kind)
		require.Empty(t, cmp.Diff([]statusJSON{{Path: path, Journal: j}}, list.Items))
		var kinds struct {
			Items []struct {
				Kind string `json:"kind"`
			} `json:"items"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(r.stdout), &kinds))
		require.Equal(t, "Journal", kinds.Items[0].Kind, "each item is typed too")
		// -journal FILE reads the same journal.
		r2 := upgrader(t, nil, "status", "-journal", path, output)
		require.Equal(t, r.stdout, r2.stdout)
	}
}

func TestRollback(t *testing.T) {
	tests := []struct {
		name       string
		failStep   string
		wantLedger string // after run and rollback
	}{
		{"after a failure", "two", "one ran\ntwo ran\ntwo undone\none undone\n"},
		{"after success", "", "one ran\ntwo ran\nrestart ran\ntwo undone\none undone\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, journal, ledger := setup(t, tt.failStep)
			upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal)

			r := upgrader(t, nil, "rollback", "-plan", plan, "-direct", "-journal-dir", journal)
			require.Equal(t, exitOK, r.code)
			require.Contains(t, r.stdout, "[2/3] two: RolledBack\n")
			require.Contains(t, r.stdout, "[1/3] one: RolledBack\n")
			require.Contains(t, r.stdout, "upgrader: plan demo RolledBack\n")
			require.Equal(t, tt.wantLedger, ledger(), "restart has nothing to undo")

			// Done once: asking again runs nothing, and run does not undo it.
			r = upgrader(t, nil, "rollback", "-plan", plan, "-direct", "-journal-dir", journal)
			require.Equal(t, exitOK, r.code)
			require.Contains(t, r.stdout, "nothing to do")
			r = upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal)
			require.Equal(t, exitRolledBack, r.code)
			require.Equal(t, tt.wantLedger, ledger())
			r = upgrader(t, nil, "status", "-journal-dir", journal)
			require.Equal(t, exitRolledBack, r.code)

			// reset lets it run again from the first step.
			r = upgrader(t, nil, "reset", "-journal-dir", journal, "demo")
			require.Equal(t, exitOK, r.code)
			require.Contains(t, r.stdout, "journal of plan demo deleted")
			r = upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal)
			require.Contains(t, ledger(), tt.wantLedger+"one ran\n")
		})
	}
}

func TestRollbackStopsAtStepThatCannotBeUndone(t *testing.T) {
	dir := t.TempDir()
	p := ledgerPlan(filepath.Join(dir, "ledger"), "")
	p.Steps[2].NothingToUndo = false // like `kubeadm upgrade apply`
	data, err := nodeexec.EncodePlan(p)
	require.NoError(t, err)
	env := map[string]string{nodeexec.EnvPlan: string(data), nodeexec.EnvJournalDir: dir}
	require.Equal(t, exitOK, upgrader(t, env, "run", "-direct").code)
	r := upgrader(t, env, "rollback", "-direct")
	require.Equal(t, exitNeedsAttention, r.code)
	require.Contains(t, r.stdout, `failure: step "restart" (rollback)`)
	require.Contains(t, r.stdout, "the rollback was requested while the plan was Succeeded")
	require.Equal(t, exitNeedsAttention, upgrader(t, env, "status").code)
}

func TestRollbackRefused(t *testing.T) {
	plan, journal, ledger := setup(t, "")
	r := upgrader(t, nil, "rollback", "-plan", plan, "-direct", "-journal-dir", journal)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "no journal for the plan")
	require.NoDirExists(t, journal)

	// A journal written for another version of the plan is not rolled back
	// with this version's rollback argvs.
	upgrader(t, nil, "run", "-plan", plan, "-direct", "-journal-dir", journal)
	other := ledgerPlan(filepath.Join(t.TempDir(), "ledger"), "")
	data, err := nodeexec.EncodePlan(other)
	require.NoError(t, err)
	r = upgrader(t, map[string]string{nodeexec.EnvPlan: string(data)}, "rollback", "-direct", "-journal-dir", journal)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "journal belongs to a different plan")
	require.Equal(t, "one ran\ntwo ran\nrestart ran\n", ledger())
}

// TestRunFromPodEnvironment runs the plan the way the init-container pod
// does: everything from the environment, one container per step
// (UPGRADEKIT_STOP_AFTER), a summary in the termination message file.
func TestRunFromPodEnvironment(t *testing.T) {
	dir := t.TempDir()
	p := ledgerPlan(filepath.Join(dir, "ledger"), "")
	data, err := nodeexec.EncodePlan(p)
	require.NoError(t, err)
	summary := filepath.Join(dir, "termination-log")
	env := map[string]string{
		nodeexec.EnvPlan:        string(data),
		nodeexec.EnvJournalDir:  filepath.Join(dir, "journal"),
		nodeexec.EnvSummaryFile: summary,
		nodeexec.EnvStopAfter:   "one",
	}
	r := upgrader(t, env, "run", "-direct")
	require.Equal(t, exitOK, r.code, "stopping after the requested step is success")
	require.Contains(t, r.stdout, "upgrader: plan demo Running\n")
	raw, err := os.ReadFile(summary)
	require.NoError(t, err)
	sum, err := nodeexec.ParseSummary(raw)
	require.NoError(t, err)
	require.Equal(t, nodeexec.Summary{Plan: "demo", State: nodeexec.PlanStateRunning, Steps: []nodeexec.SummaryStep{
		{Name: "one", State: nodeexec.StepStateSucceeded}, {Name: "two", State: nodeexec.StepStatePending}, {Name: "restart", State: nodeexec.StepStatePending},
	}}, sum)

	// The status container: no stop-after, runs what is left.
	delete(env, nodeexec.EnvStopAfter)
	r = upgrader(t, env, "run", "-direct")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, "[1/3] one: Succeeded (exit 0, 1 attempt(s))\n", "the first progress line shows what earlier containers did")
	raw, err = os.ReadFile(summary)
	require.NoError(t, err)
	sum, err = nodeexec.ParseSummary(raw)
	require.NoError(t, err)
	require.Equal(t, nodeexec.PlanStateSucceeded, sum.State)

	// Flags override the environment.
	r = upgrader(t, env, "status", "-journal-dir", t.TempDir(), "demo")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "no journal")
	require.Equal(t, exitOK, upgrader(t, env, "status", "demo").code)
}

func TestUsage(t *testing.T) {
	plan, journal, _ := setup(t, "")
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		want   int
		stderr string
	}{
		{"no command", nil, nil, exitUsage, "upgrader: name a command (run, rollback, status, reset, version)\nSee 'upgrader --help' for usage.\n"},
		{"unknown command", nil, []string{"upgrade"}, exitUsage, "upgrader: unknown command \"upgrade\" (run, rollback, status, reset, version)\nSee 'upgrader --help' for usage.\n"},
		{"help", nil, []string{"help"}, exitOK, ""},
		{"command help", nil, []string{"run", "-h"}, exitOK, "-stop-after"},
		{"unknown flag", nil, []string{"run", "-bogus"}, exitUsage, "upgrader run: unknown flag: --bogus\nSee 'upgrader run --help' for usage.\n"},
		{"stop-after is not a rollback flag", nil, []string{"rollback", "-stop-after", "one"}, exitUsage, "unknown flag: --stop-after"},
		{"stray argument", nil, []string{"run", "-plan", plan, "extra"}, exitUsage, `unexpected arguments ["extra"]`},
		{"no plan", nil, []string{"run", "-direct", "-journal-dir", journal}, exitError, "UPGRADEKIT_PLAN: required environment variable is not set"},
		{"missing plan file", nil, []string{"run", "-plan", filepath.Join(journal, "nope.json")}, exitError, "no such file"},
		{"invalid plan", map[string]string{nodeexec.EnvPlan: `{"name":"x","node":"n","steps":[]}`}, []string{"run"}, exitError, "plan has no steps"},
		{"bad target PID", nil, []string{"run", "-plan", plan, "-target-pid", "0"}, exitError, "want a PID >= 1"},
		{"bad stop-after step", nil, []string{"run", "-plan", plan, "-direct", "-journal-dir", journal, "-stop-after", "nope"}, exitError, `plan has no step "nope"`},
		{"bad output format", nil, []string{"status", "-o", "xml"}, exitUsage, `--output "xml": want text, json, yaml`},
		{"negative tail", nil, []string{"status", "-tail", "-1"}, exitUsage, "-tail -1"},
		{"journal file and plan names", nil, []string{"status", "-journal", "f", "demo"}, exitUsage, "--journal names one file"},
		{"plan name with a slash", nil, []string{"status", "../etc"}, exitUsage, "invalid plan: name: invalid name: \"../etc\""},
		{"status of an unknown plan", nil, []string{"status", "-journal-dir", journal, "nope"}, exitError, "no journal"},
		{"status of a missing directory", nil, []string{"status", "-journal-dir", filepath.Join(t.TempDir(), "nope")}, exitError, "no such file or directory"},
		{"reset without plan", nil, []string{"reset"}, exitUsage, "name the plans"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := upgrader(t, tt.env, tt.args...)
			require.Equal(t, tt.want, r.code)
			require.Contains(t, r.stderr, tt.stderr)
		})
	}
	require.NoDirExists(t, journal, "no usage error ran anything")
}

func TestStateCodesOrderSeverity(t *testing.T) {
	order := []nodeexec.PlanState{nodeexec.PlanStateSucceeded, nodeexec.PlanStateRunning, nodeexec.PlanStateRolledBack, nodeexec.PlanStateFailed, nodeexec.PlanStateNeedsAttention}
	for i := 1; i < len(order); i++ {
		require.Greater(t, stateCode(order[i]), stateCode(order[i-1]), "%s is worse than %s", order[i], order[i-1])
	}
	require.Equal(t, exitInProgress, stateCode(nodeexec.PlanStateRollingBack))
	require.Equal(t, exitError, run(context.Background(), []string{"status", "-journal-dir", t.TempDir(), "x"}, func(string) string { return "" }, &bytes.Buffer{}, &bytes.Buffer{}))
}
