package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeOSV(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBuildDB(t *testing.T) {
	src := t.TempDir()
	// As in the golang.org/x/vulndb module: undated entries, one of them
	// for two modules, with fields the index does not read.
	writeOSV(t, src, "GO-2026-6603.json", `{
  "schema_version": "1.3.1",
  "id": "GO-2026-6603",
  "modified": "0001-01-01T00:00:00Z",
  "aliases": ["CVE-2026-0001"],
  "affected": [
    {"package": {"name": "stdlib", "ecosystem": "Go"}, "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.26.9"}]}]},
    {"package": {"name": "golang.org/x/net", "ecosystem": "Go"}, "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "0.60.0"}]}]}
  ],
  "database_specific": {"review_status": "REVIEWED"}
}`)
	writeOSV(t, src, "GO-2021-0001.json", `{"id": "GO-2021-0001", "modified": "2023-06-01T10:00:00Z",
  "affected": [{"package": {"name": "example.com/m"}}]}`)
	writeOSV(t, src, "README.md", "not an entry")

	out := filepath.Join(t.TempDir(), "db")
	commit := time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)
	n, err := BuildDB(src, out, commit)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}

	var db dbMeta
	readJSON(t, filepath.Join(out, "index", "db.json"), &db)
	if !db.Modified.Equal(commit) {
		t.Errorf("db modified %v, want the commit time %v (the newest entry)", db.Modified, commit)
	}
	for module, want := range map[string][]string{
		"stdlib":           {"GO-2026-6603"},
		"golang.org/x/net": {"GO-2026-6603"},
		"example.com/m":    {"GO-2021-0001"},
	} {
		got, err := moduleIDs(out, module)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("modules.json lists %v for %s, want %v", got, module, want)
		}
	}
	var vulns []vulnMeta
	readJSON(t, filepath.Join(out, "index", "vulns.json"), &vulns)
	if len(vulns) != 2 || vulns[0].ID != "GO-2021-0001" || !slices.Equal(vulns[1].Aliases, []string{"CVE-2026-0001"}) {
		t.Errorf("vulns.json = %+v", vulns)
	}

	// The entry keeps its fields and takes the commit time.
	var entry map[string]any
	readJSON(t, filepath.Join(out, "ID", "GO-2026-6603.json"), &entry)
	if entry["modified"] != "2026-11-05T23:49:57Z" || entry["schema_version"] != "1.3.1" || entry["database_specific"] == nil {
		t.Errorf("entry = %v", entry)
	}
	var dated map[string]any
	readJSON(t, filepath.Join(out, "ID", "GO-2021-0001.json"), &dated)
	if dated["modified"] != "2023-06-01T10:00:00Z" {
		t.Errorf("a dated entry was re-dated: %v", dated["modified"])
	}

	if _, err := BuildDB(src, out, commit); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("writing over a database: err = %v", err)
	}
}

func TestBuildDBRejects(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no entries":       {"README.md": "x"},
		"misnamed entry":   {"GO-2026-0002.json": `{"id": "GO-2026-0001"}`},
		"not an OSV entry": {"GO-2026-0001.json": `[1, 2]`},
		"not a Go ID":      {"CVE-2026-1.json": `{"id": "CVE-2026-1"}`},
	} {
		t.Run(name, func(t *testing.T) {
			src := t.TempDir()
			for f, text := range files {
				writeOSV(t, src, f, text)
			}
			if _, err := BuildDB(src, filepath.Join(t.TempDir(), "db"), time.Now()); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
