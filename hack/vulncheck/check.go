package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// AllowEntry is one line of the allowlist:
//
//	ID MODULE ADDED EXPIRES REASON...
//
// e.g. "GO-2026-1234 stdlib 2026-11-27 2027-01-31 fixed only in go1.28".
// MODULE is the module govulncheck reports ("stdlib" for the standard
// library, "toolchain" for the go command). Blank lines and lines
// starting with # are ignored.
type AllowEntry struct {
	ID, Module     string
	Added, Expires time.Time
	Reason         string
	Line           int
}

// maxAllow is the longest an entry may stay: an allowance is a dated
// promise to fix, renewed on purpose, not a silent exception.
const maxAllow = 180 * 24 * time.Hour

// ParseAllowlist reads an allowlist. Every entry needs an ID of the form
// GO-YYYY-NNNN, a module, an added date, an expiry date after it and no
// more than 180 days later, and a reason; an ID and module listed twice
// is an error.
func ParseAllowlist(r io.Reader) ([]AllowEntry, error) {
	var out []AllowEntry
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("line %d: want ID MODULE ADDED EXPIRES REASON, got %d fields", n, len(f))
		}
		if !idPattern.MatchString(f[0]) {
			return nil, fmt.Errorf("line %d: %q is not a Go vulnerability ID (GO-YYYY-NNNN)", n, f[0])
		}
		added, err := time.Parse(time.DateOnly, f[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: added date: %w", n, err)
		}
		expires, err := time.Parse(time.DateOnly, f[3])
		if err != nil {
			return nil, fmt.Errorf("line %d: expiry date: %w", n, err)
		}
		if !expires.After(added) || expires.Sub(added) > maxAllow {
			return nil, fmt.Errorf("line %d: expiry %s must be after %s and at most 180 days later", n, f[3], f[2])
		}
		key := f[0] + " " + f[1]
		if prev, dup := seen[key]; dup {
			return nil, fmt.Errorf("line %d: %s is listed already on line %d", n, key, prev)
		}
		seen[key] = n
		out = append(out, AllowEntry{ID: f[0], Module: f[1], Added: added, Expires: expires,
			Reason: strings.Join(f[4:], " "), Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Finding is one reachable vulnerability of one report: the first
// function-level trace govulncheck gave for it.
type Finding struct {
	ID, Module, Version, Fixed string
	// Symbol is the vulnerable function reached, e.g. "net/http.Serve";
	// Caller the project's function the trace starts from, when
	// govulncheck gave one (source mode).
	Symbol, Caller string
}

// Report is one govulncheck -format json run.
type Report struct {
	Name      string
	GoVersion string
	Mode      string
	DB        string
	DBDate    time.Time
	Reachable []Finding
	// Imported counts vulnerabilities found only at package or module
	// level (imported or required, never called): reported, never fatal.
	Imported int
}

type (
	message struct {
		Config *struct {
			DB             string     `json:"db"`
			DBLastModified *time.Time `json:"db_last_modified"`
			GoVersion      string     `json:"go_version"`
			ScanMode       string     `json:"scan_mode"`
		} `json:"config"`
		SBOM *struct {
			GoVersion string `json:"go_version"`
		} `json:"SBOM"`
		Finding *struct {
			OSV          string  `json:"osv"`
			FixedVersion string  `json:"fixed_version"`
			Trace        []frame `json:"trace"`
		} `json:"finding"`
	}
	frame struct {
		Module   string `json:"module"`
		Version  string `json:"version"`
		Package  string `json:"package"`
		Function string `json:"function"`
		Receiver string `json:"receiver"`
	}
)

func (f frame) symbol() string {
	fn := f.Function
	if f.Receiver != "" {
		fn = strings.TrimPrefix(f.Receiver, "*") + "." + fn
	}
	return f.Package + "." + fn
}

// ParseReport reads the stream of JSON messages govulncheck -format json
// writes. A finding is reachable when its trace starts at a function
// (govulncheck's own test for "your code calls it").
func ParseReport(r io.Reader) (Report, error) {
	var rep Report
	reachable := map[string]bool{}
	imported := map[string]bool{}
	dec := json.NewDecoder(r)
	sawConfig := false
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rep, fmt.Errorf("not a govulncheck JSON stream: %w", err)
		}
		if c := m.Config; c != nil {
			sawConfig = true
			rep.GoVersion, rep.Mode, rep.DB = c.GoVersion, c.ScanMode, c.DB
			if c.DBLastModified != nil {
				rep.DBDate = *c.DBLastModified
			}
		}
		if m.SBOM != nil && rep.GoVersion == "" {
			rep.GoVersion = m.SBOM.GoVersion // binary mode: the binary's Go
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 {
			continue
		}
		top := f.Trace[0]
		if top.Function == "" {
			imported[f.OSV] = true
			continue
		}
		if reachable[f.OSV+" "+top.Module] {
			continue
		}
		reachable[f.OSV+" "+top.Module] = true
		fd := Finding{ID: f.OSV, Module: top.Module, Version: top.Version, Fixed: f.FixedVersion, Symbol: top.symbol()}
		if last := f.Trace[len(f.Trace)-1]; len(f.Trace) > 1 && last.Function != "" {
			fd.Caller = last.symbol()
		}
		rep.Reachable = append(rep.Reachable, fd)
	}
	if !sawConfig {
		return rep, errors.New("no config message: not a govulncheck -format json report")
	}
	for id := range imported {
		if !reachableID(reachable, id) {
			rep.Imported++
		}
	}
	sort.Slice(rep.Reachable, func(i, j int) bool {
		a, b := rep.Reachable[i], rep.Reachable[j]
		return a.ID < b.ID || a.ID == b.ID && a.Module < b.Module
	})
	return rep, nil
}

func reachableID(reachable map[string]bool, id string) bool {
	for k := range reachable {
		if strings.HasPrefix(k, id+" ") {
			return true
		}
	}
	return false
}

// Verdict is what the check decided about one reachable finding.
type Verdict struct {
	Report  string
	Finding Finding
	// Allowed by Entry (nil: not listed); Expired when the entry has
	// passed its expiry date.
	Entry   *AllowEntry
	Expired bool
}

// Result is the outcome of Check.
type Result struct {
	Reports  []Report
	Verdicts []Verdict
	// ExpiredEntries are allowlist entries past their expiry date, used
	// or not; UnusedEntries matched no finding (worth removing).
	ExpiredEntries, UnusedEntries []AllowEntry
	Today                         time.Time
}

// Check decides every reachable finding of the reports against the
// allowlist on day today. An entry allows a finding of the same ID and
// module up to and including its expiry date.
func Check(reports []Report, allow []AllowEntry, today time.Time) Result {
	res := Result{Reports: reports, Today: today}
	used := make([]bool, len(allow))
	for _, r := range reports {
		for _, f := range r.Reachable {
			v := Verdict{Report: r.Name, Finding: f}
			for i := range allow {
				if allow[i].ID == f.ID && allow[i].Module == f.Module {
					v.Entry, v.Expired, used[i] = &allow[i], today.After(allow[i].Expires), true
				}
			}
			res.Verdicts = append(res.Verdicts, v)
		}
	}
	for i, e := range allow {
		if today.After(e.Expires) {
			res.ExpiredEntries = append(res.ExpiredEntries, e)
		}
		if !used[i] {
			res.UnusedEntries = append(res.UnusedEntries, e)
		}
	}
	return res
}

// OK reports whether the check passes: every reachable finding is
// listed by an entry that has not expired, and no entry has expired.
func (r Result) OK() bool {
	if len(r.ExpiredEntries) > 0 {
		return false
	}
	for _, v := range r.Verdicts {
		if v.Entry == nil || v.Expired {
			return false
		}
	}
	return true
}

// Write prints the outcome for people: one block a report, then the
// allowlist's problems and a closing line.
func (r Result) Write(w io.Writer) {
	reachable := map[string]bool{}
	for _, rep := range r.Reports {
		fmt.Fprintf(w, "%s: %s mode, %s, database %s (modified %s)\n", rep.Name, rep.Mode, rep.GoVersion, rep.DB, rep.DBDate.Format(time.DateOnly))
		ids := map[string]bool{}
		for _, v := range r.Verdicts {
			if v.Report != rep.Name {
				continue
			}
			ids[v.Finding.ID] = true
			reachable[v.Finding.ID] = true
			f := v.Finding
			status := "NOT ALLOWED"
			switch {
			case v.Entry != nil && v.Expired:
				status = fmt.Sprintf("allowlist entry (line %d) EXPIRED on %s", v.Entry.Line, v.Entry.Expires.Format(time.DateOnly))
			case v.Entry != nil:
				status = fmt.Sprintf("allowed until %s (line %d): %s", v.Entry.Expires.Format(time.DateOnly), v.Entry.Line, v.Entry.Reason)
			}
			fixed := f.Fixed
			if fixed == "" {
				fixed = "no fix"
			}
			via := ""
			if f.Caller != "" {
				via = " from " + f.Caller
			}
			fmt.Fprintf(w, "  %s %s@%s (fixed in %s): reaches %s%s: %s\n", f.ID, f.Module, f.Version, fixed, f.Symbol, via, status)
		}
		fmt.Fprintf(w, "  %d reachable vulnerabilities, %d more imported or required but not called\n", len(ids), rep.Imported)
	}
	for _, e := range r.ExpiredEntries {
		fmt.Fprintf(w, "allowlist line %d: %s %s expired on %s: fix it or renew the entry on purpose\n", e.Line, e.ID, e.Module, e.Expires.Format(time.DateOnly))
	}
	for _, e := range r.UnusedEntries {
		fmt.Fprintf(w, "allowlist line %d: %s %s matched no reachable finding: remove it\n", e.Line, e.ID, e.Module)
	}
	verdict := "ok"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "vulncheck: %s: %d reachable vulnerabilities across %d reports, %d allowlist entries expired (%s)\n",
		verdict, len(reachable), len(r.Reports), len(r.ExpiredEntries), r.Today.Format(time.DateOnly))
}
