package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/upgradekit/upgradekit/examples/cli"
	"github.com/upgradekit/upgradekit/nodeexec"
)

// statusJSON is one item of `status -o json|yaml` (a JournalList): the
// journal as stored, plus where it was read from.
type statusJSON struct {
	Path string `json:"journal"`
	nodeexec.Journal
}

// status prints the journals of the named plans (all journals in the
// directory when none is named, or the one file given with --journal).
func status(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	flags := cli.NewFlagSet("upgrader status")
	flags.Usage = func() { cli.WriteHelp(stderr, flags, "usage: "+flags.Name()+" [flags]") }
	dir := flags.String("journal-dir", "", "journal directory; default $"+nodeexec.EnvJournalDir+" or "+nodeexec.DefaultJournalDir)
	file := flags.String("journal", "", "read this journal file instead of looking plans up in the directory")
	var format string
	cli.OutputFlag(flags, &format, cli.Text, cli.JSON, cli.YAML)
	tail := flags.Int("tail", 3, "lines of each step's journaled output to print (text only; 0 for none)")
	if err := cli.Parse(flags, args); err != nil {
		return usageError(stderr, flags.Name(), err)
	}
	switch {
	case cli.CheckOutput(format, cli.Text, cli.JSON, cli.YAML) != nil:
		return usagef(stderr, "upgrader status", "%v", cli.CheckOutput(format, cli.Text, cli.JSON, cli.YAML))
	case *tail < 0:
		return usagef(stderr, "upgrader status", "--tail %d: want 0 or more", *tail)
	case *file != "" && (*dir != "" || flags.NArg() > 0):
		return usagef(stderr, "upgrader status", "--journal names one file; it takes no --journal-dir or plan names")
	}
	for _, p := range flags.Args() {
		if err := nodeexec.CheckPlanName(p); err != nil {
			return usagef(stderr, "upgrader status", "%v", err)
		}
	}
	paths, err := journalPaths(*file, journalDir(*dir, getenv), flags.Args())
	if err != nil {
		fmt.Fprintf(stderr, "upgrader status: %v\n", err)
		return exitError
	}
	if len(paths) == 0 {
		// An empty result is not an error, as kubectl get's "No
		// resources found": a note on stderr, exit 0; with -o json|yaml an
		// empty list on stdout, as kubectl get -o json prints one.
		fmt.Fprintf(stderr, "No journals found in %s.\n", journalDir(*dir, getenv))
		if format != cli.Text {
			if err := cli.WriteObject(stdout, format, "Journal", []statusJSON{}); err != nil {
				fmt.Fprintf(stderr, "upgrader status: %v\n", err)
				return exitError
			}
		}
		return exitOK
	}
	code := exitOK
	var items []statusJSON
	for i, path := range paths {
		j, err := nodeexec.ReadJournal(path)
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%s: no journal: the plan has not run with this journal directory", path)
		}
		if err != nil {
			fmt.Fprintf(stderr, "upgrader status: %v\n", err)
			code = max(code, exitError)
			continue
		}
		code = max(code, stateCode(j.State))
		if format != cli.Text {
			items = append(items, statusJSON{Path: path, Journal: j})
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printJournal(stdout, path, j, *tail)
	}
	if format != cli.Text && len(items) > 0 {
		if err := cli.WriteObject(stdout, format, "Journal", items); err != nil {
			fmt.Fprintf(stderr, "upgrader status: %v\n", err)
			return exitError
		}
	}
	return code
}

// journalPaths resolves what status reads.
func journalPaths(file, dir string, plans []string) ([]string, error) {
	if file != "" {
		return []string{file}, nil
	}
	var paths []string
	for _, p := range plans {
		paths = append(paths, filepath.Join(dir, nodeexec.JournalFileName(p)))
	}
	if len(paths) > 0 {
		return paths, nil
	}
	// No plans named: every journal of the directory, none when it has
	// none; a directory that is not there is an error.
	paths, err := filepath.Glob(filepath.Join(dir, nodeexec.JournalFileName("*")))
	if err == nil && len(paths) == 0 {
		_, err = os.Stat(dir)
	}
	slices.Sort(paths)
	return paths, err
}

// printJournal writes one journal as text: a header, a table of steps,
// the failure, and the tail of each step's output.
func printJournal(w io.Writer, path string, j nodeexec.Journal, tail int) {
	fmt.Fprintf(w, "plan %s  node %s  state %s  runs %d  updated %s\n", j.Plan, j.Node, j.State, j.Runs, j.Updated.Format(time.RFC3339))
	fmt.Fprintf(w, "journal %s\n", path)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATE\tATTEMPTS\tEXIT\tBACKUP\tNOTE")
	for _, s := range j.Steps {
		exit, backup := "-", "-"
		if s.Attempts > 0 && s.State != nodeexec.StepStateRunning { // a running step has no exit code yet
			exit = fmt.Sprint(s.ExitCode)
		}
		if s.BackupTaken {
			backup = "taken"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.Name, s.State, s.Attempts, exit, backup, s.Note)
	}
	_ = tw.Flush()
	if f := j.Failure; f != nil {
		fmt.Fprintf(w, "failure: step %q (%s) exit code %d after %d attempt(s)%s\n", f.Step, f.Phase, f.ExitCode, f.Attempts, suffix(": ", f.Error))
		printTail(w, "failure output", f.Output, tail)
	}
	for _, s := range j.Steps {
		printTail(w, "output of "+s.Name, s.Output, tail)
	}
}

func printTail(w io.Writer, title, output string, n int) {
	lines := strings.Split(strings.TrimRight(output, "\n"), "\n")
	if n == 0 || output == "" {
		return
	}
	fmt.Fprintf(w, "%s (last %d of %d lines):\n", title, min(n, len(lines)), len(lines))
	for _, l := range lines[max(0, len(lines)-n):] {
		fmt.Fprintf(w, "  | %s\n", l)
	}
}
