// Command vulncheck is the project's glue around govulncheck, with no
// network and no dependency outside the standard library:
//
//	vulncheck index -osv DIR -out DIR -modified RFC3339
//	vulncheck check -allow FILE [-today YYYY-MM-DD] REPORT.json...
//
// index turns a directory of OSV entries (the data/osv directory of the
// golang.org/x/vulndb module) into the v1 database layout govulncheck's
// -db file:///DIR reads: index/db.json, index/modules.json,
// index/vulns.json and ID/<ID>.json. Entries whose "modified" is the zero
// time (the module zip has no git history to date them) are dated
// -modified, the vulndb commit time.
//
// check reads govulncheck -format json reports and fails when a
// vulnerability is reachable (a finding whose trace starts at a function:
// govulncheck's "your code calls it") unless the allowlist names its ID
// and module with an expiry date not yet passed. An expired entry fails
// the check whether or not it is still needed. See hack/vulncheck-allow.txt
// for the file's format.
//
// Exit codes: 0 clean (or everything reachable allowed), 1 findings or
// an error, 2 usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: vulncheck index|check [flags]")
		return 2
	}
	switch args[0] {
	case "index":
		return runIndex(args[1:], stderr)
	case "check":
		return runCheck(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "vulncheck: unknown command %q (want index or check)\n", args[0])
		return 2
	}
}

func runIndex(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("vulncheck index", flag.ContinueOnError)
	fs.SetOutput(stderr)
	osvDir := fs.String("osv", "", "directory of OSV entries (<ID>.json)")
	out := fs.String("out", "", "database directory to write (must not exist)")
	modified := fs.String("modified", "", "RFC 3339 time for entries dated the zero time")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	mod, err := time.Parse(time.RFC3339, *modified)
	if *osvDir == "" || *out == "" || err != nil || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "vulncheck index: need -osv DIR, -out DIR and -modified RFC3339")
		return 2
	}
	n, err := BuildDB(*osvDir, *out, mod)
	if err != nil {
		fmt.Fprintf(stderr, "vulncheck index: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "vulncheck index: %d entries written to %s\n", n, *out)
	return 0
}

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vulncheck check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	allowPath := fs.String("allow", "", "allowlist file")
	today := fs.String("today", "", "the date the expiry dates are compared with, YYYY-MM-DD (default: today, UTC)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *allowPath == "" || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "vulncheck check: need -allow FILE and at least one govulncheck JSON report")
		return 2
	}
	day := time.Now().UTC().Truncate(24 * time.Hour)
	if *today != "" {
		d, err := time.Parse(time.DateOnly, *today)
		if err != nil {
			fmt.Fprintf(stderr, "vulncheck check: -today: %v\n", err)
			return 2
		}
		day = d
	}
	allow, err := readAllowlistFile(*allowPath)
	if err != nil {
		fmt.Fprintf(stderr, "vulncheck check: %v\n", err)
		return 1
	}
	var reports []Report
	for _, path := range fs.Args() {
		r, err := readReportFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "vulncheck check: %v\n", err)
			return 1
		}
		reports = append(reports, r)
	}
	res := Check(reports, allow, day)
	res.Write(stdout)
	if !res.OK() {
		return 1
	}
	return 0
}

func readAllowlistFile(path string) ([]AllowEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("allowlist: %w", err)
	}
	defer f.Close()
	entries, err := ParseAllowlist(f)
	if err != nil {
		return nil, fmt.Errorf("allowlist %s: %w", path, err)
	}
	return entries, nil
}

func readReportFile(path string) (Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{}, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	r, err := ParseReport(f)
	if err != nil {
		return Report{}, fmt.Errorf("report %s: %w", path, err)
	}
	r.Name = filepath.Base(path)
	return r, nil
}
