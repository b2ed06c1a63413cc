package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"
)

// osvEntry is the part of an OSV entry the indexes need.
type osvEntry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
	} `json:"affected"`
}

// The v1 database's index files (golang.org/x/vuln reads index/db.json
// and index/modules.json; index/vulns.json is part of the layout the
// public database serves).
type (
	dbMeta struct {
		Modified time.Time `json:"modified"`
	}
	moduleMeta struct {
		Path  string       `json:"path"`
		Vulns []moduleVuln `json:"vulns"`
	}
	// moduleVuln leaves out the optional "fixed" version: govulncheck
	// uses it only to skip fetching entries fixed before the version in
	// use, and without it fetches each entry and decides from the
	// entry's own ranges, so the result is the same.
	moduleVuln struct {
		ID       string    `json:"id"`
		Modified time.Time `json:"modified"`
	}
	vulnMeta struct {
		ID       string    `json:"id"`
		Modified time.Time `json:"modified"`
		Aliases  []string  `json:"aliases,omitempty"`
	}
)

var idPattern = regexp.MustCompile(`^GO-[0-9]{4}-[0-9]{4,}$`)

// BuildDB writes the v1 database for the OSV entries in osvDir (files
// <ID>.json) to out, which must not exist yet. Entries dated the zero
// time are dated modified. It returns the number of entries.
func BuildDB(osvDir, out string, modified time.Time) (int, error) {
	if _, err := os.Stat(out); err == nil {
		return 0, fmt.Errorf("%s exists already", out)
	}
	names, err := filepath.Glob(filepath.Join(osvDir, "*.json"))
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", osvDir, err)
	}
	if len(names) == 0 {
		return 0, fmt.Errorf("no OSV entries (*.json) in %s", osvDir)
	}
	if err := os.MkdirAll(filepath.Join(out, "ID"), 0o755); err != nil {
		return 0, fmt.Errorf("create %s: %w", out, err)
	}
	if err := os.MkdirAll(filepath.Join(out, "index"), 0o755); err != nil {
		return 0, fmt.Errorf("create %s: %w", out, err)
	}
	var (
		db      dbMeta
		vulns   []vulnMeta
		modules = map[string]*moduleMeta{}
	)
	for _, name := range names {
		raw, err := os.ReadFile(name)
		if err != nil {
			return 0, fmt.Errorf("read entry: %w", err)
		}
		var e osvEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return 0, fmt.Errorf("%s: %w", filepath.Base(name), err)
		}
		if !idPattern.MatchString(e.ID) || filepath.Base(name) != e.ID+".json" {
			return 0, fmt.Errorf("%s: entry id %q does not name the file", filepath.Base(name), e.ID)
		}
		if e.Modified.IsZero() {
			e.Modified = modified
			if raw, err = setModified(raw, modified); err != nil {
				return 0, fmt.Errorf("%s: %w", e.ID, err)
			}
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), raw, 0o644); err != nil {
			return 0, fmt.Errorf("write entry: %w", err)
		}
		if e.Modified.After(db.Modified) {
			db.Modified = e.Modified
		}
		vulns = append(vulns, vulnMeta{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		seen := map[string]bool{}
		for _, a := range e.Affected {
			path := a.Package.Name
			if path == "" || seen[path] {
				continue
			}
			seen[path] = true
			m := modules[path]
			if m == nil {
				m = &moduleMeta{Path: path}
				modules[path] = m
			}
			m.Vulns = append(m.Vulns, moduleVuln{ID: e.ID, Modified: e.Modified})
		}
	}
	sort.Slice(vulns, func(i, j int) bool { return vulns[i].ID < vulns[j].ID })
	mods := make([]*moduleMeta, 0, len(modules))
	for _, m := range modules {
		sort.Slice(m.Vulns, func(i, j int) bool { return m.Vulns[i].ID < m.Vulns[j].ID })
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	for file, v := range map[string]any{"db.json": db, "modules.json": mods, "vulns.json": vulns} {
		b, err := json.Marshal(v)
		if err != nil {
			return 0, fmt.Errorf("index/%s: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(out, "index", file), b, 0o644); err != nil {
			return 0, fmt.Errorf("write index: %w", err)
		}
	}
	return len(vulns), nil
}

// setModified replaces the entry's top-level "modified" and keeps every
// other field as it was.
func setModified(raw []byte, t time.Time) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	ts, err := json.Marshal(t.UTC())
	if err != nil {
		return nil, err
	}
	fields["modified"] = ts
	return json.MarshalIndent(fields, "", "  ")
}

// moduleIDs returns, for tests and diagnostics, the IDs index/modules.json
// lists for module path.
func moduleIDs(dir, path string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "index", "modules.json"))
	if err != nil {
		return nil, err
	}
	var mods []moduleMeta
	if err := json.Unmarshal(b, &mods); err != nil {
		return nil, fmt.Errorf("index/modules.json: %w", err)
	}
	for _, m := range mods {
		if m.Path == path {
			ids := make([]string, 0, len(m.Vulns))
			for _, v := range m.Vulns {
				ids = append(ids, v.ID)
			}
			return ids, nil
		}
	}
	return nil, nil
}
