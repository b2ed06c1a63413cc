package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func day(s string) time.Time {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return d
}

func TestParseAllowlist(t *testing.T) {
	for _, tc := range []struct {
		name, text, err string
		n               int
	}{
		{name: "empty", text: "# nothing allowed\n\n"},
		{name: "one", text: "GO-2026-6599 stdlib 2026-11-27 2027-01-31 fixed only in a newer minor\n", n: 1},
		{name: "too few fields", text: "GO-2026-6599 stdlib 2026-11-27 2027-01-31\n", err: "want ID MODULE ADDED EXPIRES REASON"},
		{name: "not a Go ID", text: "CVE-2026-1 stdlib 2026-11-27 2027-01-31 x\n", err: "not a Go vulnerability ID"},
		{name: "bad date", text: "GO-2026-6599 stdlib 27.11.2026 2027-01-31 x\n", err: "added date"},
		{name: "expiry before added", text: "GO-2026-6599 stdlib 2026-11-27 2026-11-26 x\n", err: "must be after"},
		{name: "expiry too far", text: "GO-2026-6599 stdlib 2026-11-27 2027-11-27 x\n", err: "at most 180 days"},
		{name: "duplicate", text: "GO-2026-6599 stdlib 2026-11-27 2027-01-31 x\nGO-2026-6599 stdlib 2026-11-28 2027-01-31 y\n", err: "listed already on line 1"},
		{name: "same ID, other module", text: "GO-2026-6603 stdlib 2026-11-27 2027-01-31 x\nGO-2026-6603 golang.org/x/net 2026-11-27 2027-01-31 y\n", n: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAllowlist(strings.NewReader(tc.text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.n {
				t.Fatalf("%d entries, want %d", len(got), tc.n)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	netFinding := Finding{ID: "GO-2026-6603", Module: "golang.org/x/net", Version: "v0.57.0", Fixed: "v0.60.0", Symbol: "golang.org/x/net/http2.Transport.NewClientConn"}
	stdFinding := Finding{ID: "GO-2026-6599", Module: "stdlib", Version: "v1.26.8", Fixed: "v1.26.9", Symbol: "html/template.Template.Execute"}
	entry := func(id, module, added, expires string) AllowEntry {
		return AllowEntry{ID: id, Module: module, Added: day(added), Expires: day(expires), Reason: "r", Line: 1}
	}
	for _, tc := range []struct {
		name     string
		findings []Finding
		allow    []AllowEntry
		today    string
		ok       bool
	}{
		{name: "nothing reachable", today: "2026-11-27", ok: true},
		{name: "unknown finding fails", findings: []Finding{stdFinding}, today: "2026-11-27"},
		{name: "listed finding passes", findings: []Finding{stdFinding},
			allow: []AllowEntry{entry("GO-2026-6599", "stdlib", "2026-11-27", "2027-01-31")}, today: "2026-11-27", ok: true},
		{name: "listed on its expiry day passes", findings: []Finding{stdFinding},
			allow: []AllowEntry{entry("GO-2026-6599", "stdlib", "2026-11-27", "2027-01-31")}, today: "2027-01-31", ok: true},
		{name: "expired entry fails", findings: []Finding{stdFinding},
			allow: []AllowEntry{entry("GO-2026-6599", "stdlib", "2026-11-27", "2027-01-31")}, today: "2027-02-01"},
		{name: "expired entry fails even when unused", findings: nil,
			allow: []AllowEntry{entry("GO-2026-6599", "stdlib", "2026-11-27", "2027-01-31")}, today: "2027-02-01"},
		{name: "unused live entry does not fail", findings: nil,
			allow: []AllowEntry{entry("GO-2026-6599", "stdlib", "2026-11-27", "2027-01-31")}, today: "2026-11-27", ok: true},
		{name: "entry for the other module does not cover", findings: []Finding{netFinding},
			allow: []AllowEntry{entry("GO-2026-6603", "stdlib", "2026-11-27", "2027-01-31")}, today: "2026-11-27"},
		{name: "one listed, one not", findings: []Finding{stdFinding, netFinding},
			allow: []AllowEntry{entry("GO-2026-6599", "stdlib", "2026-11-27", "2027-01-31")}, today: "2026-11-27"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check([]Report{{Name: "r.json", Reachable: tc.findings}}, tc.allow, day(tc.today))
			if res.OK() != tc.ok {
				var out bytes.Buffer
				res.Write(&out)
				t.Fatalf("OK() = %v, want %v:\n%s", res.OK(), tc.ok, out.String())
			}
		})
	}
}

// A govulncheck -format json stream, cut down: the config, an OSV entry,
// a module-level and a package-level finding (imported, not called), and
// a function-level one (called) for each of two modules.
const report = `{
  "config": {
    "protocol_version": "v1.0.0",
    "scanner_name": "govulncheck",
    "db": "file:///db",
    "db_last_modified": "2026-11-05T23:49:57Z",
    "go_version": "go1.26.8",
    "scan_level": "symbol",
    "scan_mode": "source"
  }
}
{"osv": {"id": "GO-2026-6603", "modified": "2026-11-05T23:49:57Z"}}
{"finding": {"osv": "GO-2026-6603", "fixed_version": "v0.60.0", "trace": [{"module": "golang.org/x/net", "version": "v0.57.0"}]}}
{"finding": {"osv": "GO-2026-6700", "trace": [{"module": "example.com/m", "version": "v1.0.0", "package": "example.com/m/p"}]}}
{"finding": {"osv": "GO-2026-6603", "fixed_version": "v0.60.0", "trace": [
  {"module": "golang.org/x/net", "version": "v0.57.0", "package": "golang.org/x/net/http2", "function": "NewClientConn", "receiver": "*Transport"},
  {"module": "github.com/upgradekit/upgradekit", "package": "github.com/upgradekit/upgradekit/harness/clusterapi", "function": "Start"}]}}
{"finding": {"osv": "GO-2026-6603", "fixed_version": "v1.26.9", "trace": [
  {"module": "stdlib", "version": "v1.26.8", "package": "net/http", "function": "Do", "receiver": "*Client"}]}}
{"finding": {"osv": "GO-2026-6603", "fixed_version": "v1.26.9", "trace": [
  {"module": "stdlib", "version": "v1.26.8", "package": "net/http", "function": "Get", "receiver": "*Client"}]}}
`

func TestParseReport(t *testing.T) {
	r, err := ParseReport(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	if r.GoVersion != "go1.26.8" || r.Mode != "source" || r.DB != "file:///db" || !r.DBDate.Equal(time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)) {
		t.Fatalf("config not read: %+v", r)
	}
	want := []Finding{
		{ID: "GO-2026-6603", Module: "golang.org/x/net", Version: "v0.57.0", Fixed: "v0.60.0",
			Symbol: "golang.org/x/net/http2.Transport.NewClientConn", Caller: "github.com/upgradekit/upgradekit/harness/clusterapi.Start"},
		{ID: "GO-2026-6603", Module: "stdlib", Version: "v1.26.8", Fixed: "v1.26.9", Symbol: "net/http.Client.Do"},
	}
	if len(r.Reachable) != len(want) {
		t.Fatalf("reachable = %+v, want %+v", r.Reachable, want)
	}
	for i := range want {
		if r.Reachable[i] != want[i] {
			t.Errorf("finding %d = %+v, want %+v", i, r.Reachable[i], want[i])
		}
	}
	if r.Imported != 1 {
		t.Errorf("imported = %d, want 1 (GO-2026-6700; GO-2026-6603 is also called)", r.Imported)
	}

	// Binary mode names the binary's Go only in the SBOM message.
	bin, err := ParseReport(strings.NewReader(`{"config": {"scan_mode": "binary"}}
{"SBOM": {"go_version": "go1.27.3", "modules": []}}`))
	if err != nil || bin.GoVersion != "go1.27.3" || bin.Mode != "binary" {
		t.Errorf("binary report = %+v, %v", bin, err)
	}

	if _, err := ParseReport(strings.NewReader(`{"finding": {}}`)); err == nil {
		t.Error("a stream without a config message was accepted")
	}
	if _, err := ParseReport(strings.NewReader("No vulnerabilities found.\n")); err == nil {
		t.Error("text output was accepted")
	}
}

// TestRunCheck drives the command as make vulncheck does: the exit code
// is what fails CI.
func TestRunCheck(t *testing.T) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "root.json")
	if err := os.WriteFile(rep, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	both := "GO-2026-6603 stdlib 2026-11-27 2027-01-31 fixed in go1.26.9\nGO-2026-6603 golang.org/x/net 2026-11-27 2027-01-31 fixed in v0.60.0\n"
	for _, tc := range []struct {
		name, allow, today string
		code               int
		out                string
	}{
		{name: "nothing allowed", allow: "", today: "2026-11-27", code: 1, out: "NOT ALLOWED"},
		{name: "all allowed", allow: both, today: "2026-11-27", code: 0, out: "vulncheck: ok: 1 reachable"},
		{name: "expired", allow: both, today: "2027-02-01", code: 1, out: "EXPIRED on 2027-01-31"},
		{name: "bad allowlist", allow: "GO-2026-6603 stdlib\n", today: "2026-11-27", code: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allow := write("allow.txt", tc.allow)
			var stdout, stderr bytes.Buffer
			code := run([]string{"check", "-allow", allow, "-today", tc.today, rep}, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stdout.String(), tc.out) {
				t.Fatalf("exit %d (want %d), stdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"check", "-allow", "x"}, &stdout, &stderr); code != 2 {
		t.Errorf("no report: exit %d, want 2", code)
	}
	if code := run([]string{"frobnicate"}, &stdout, &stderr); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
}
