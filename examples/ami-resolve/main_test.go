package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/amiselect"
)

const now = "2025-06-01T00:00:00Z"

func runCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// rows parses the table into image id -> [requirements, verdict, why].
func rows(t *testing.T, out string) map[string][3]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	require.True(t, strings.HasPrefix(lines[0], "REQUIREMENTS"), out)
	whyCol := strings.Index(lines[0], "WHY")
	got := map[string][3]string{}
	for _, l := range lines[1:] {
		if l == "" {
			break
		}
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 5, l)
		got[f[1]] = [3]string{f[0], f[3], strings.TrimSpace(l[whyCol:])}
	}
	return got
}

func TestResolveExplainsWinnersAndLosers(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want map[string][3]string
	}{
		{
			name: "newest wins, deprecated and older lose",
			args: []string{"-now", now, "testdata/terms.yaml", "testdata/catalog.json"},
			want: map[string][3]string{
				"ami-0a04": {"amd64", "chosen", "matched term 0 (name=app-node-* owner=111122223333)"},
				"ami-0a03": {"amd64", "lost", "older than ami-0a04"},
				"ami-0a02": {"amd64", "lost", "deprecated since 2025-05-15"},
				"ami-0a01": {"amd64", "lost", "older than ami-0a04"},
				"ami-0b01": {"arm64", "chosen", "matched term 0 (name=app-node-* owner=111122223333)"},
			},
		},
		{
			name: "minimum age passes over the newest image",
			args: []string{"-now", now, "-min-age", "7d", "testdata/terms.yaml", "testdata/catalog.json"},
			want: map[string][3]string{
				"ami-0a03": {"amd64", "chosen", "matched term 0 (name=app-node-* owner=111122223333)"},
				"ami-0a04": {"amd64", "lost", "term 0: image created less than 168h0m0s ago (minimum age)"},
				"ami-0a02": {"amd64", "lost", "deprecated since 2025-05-15"},
				"ami-0a01": {"amd64", "lost", "older than ami-0a03"},
				"ami-0b01": {"arm64", "chosen", "matched term 0 (name=app-node-* owner=111122223333)"},
			},
		},
		{
			name: "EC2NodeClass with an alias",
			args: []string{"-now", now, "-kubernetes-version", "1.31", "testdata/nodeclass.yaml", "testdata/catalog.json"},
			want: map[string][3]string{
				"ami-0e01": {"amd64/standard", "chosen", "matched term 0 (alias=al2023@latest)"},
				"ami-0e02": {"arm64/standard", "chosen", "matched term 0 (alias=al2023@latest)"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, err := runCmd(t, tt.args...)
			require.NoError(t, err, stderr)
			require.Empty(t, cmp.Diff(tt.want, rows(t, out)))
		})
	}
}

func TestAliasNotesMissingParameters(t *testing.T) {
	out, _, err := runCmd(t, "-now", now, "-kubernetes-version", "1.31", "testdata/nodeclass.yaml", "testdata/catalog.json")
	require.NoError(t, err)
	require.Contains(t, out, `note: amiSelectorTerms[0] parameter "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id": SSM parameter not found`)
}

func TestTableIsAligned(t *testing.T) {
	out, _, err := runCmd(t, "-now", now, "testdata/terms.yaml", "testdata/catalog.json")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := strings.Index(lines[0], "VERDICT")
	for _, l := range lines[1:] {
		require.Regexp(t, `^(chosen|lost) `, l[col:], "VERDICT column misaligned in %q", l)
	}
}

// TestRecordPinAndPrevious walks the staged promotion: staging records
// with a minimum age, prod pins to that record, and a later unrestricted
// run says what would change.
func TestRecordPinAndPrevious(t *testing.T) {
	dir := t.TempDir()
	staging := filepath.Join(dir, "staging.json")
	_, _, err := runCmd(t, "-now", now, "-min-age", "168h", "-record", staging, "testdata/terms.yaml", "testdata/catalog.json")
	require.NoError(t, err)
	b, err := os.ReadFile(staging)
	require.NoError(t, err)
	var rec amiselect.Resolution
	require.NoError(t, json.Unmarshal(b, &rec))
	var ids []string
	for _, img := range rec.Images {
		ids = append(ids, img.ID)
	}
	require.ElementsMatch(t, []string{"ami-0a03", "ami-0b01"}, ids)

	out, _, err := runCmd(t, "-now", now, "-pin", staging, "testdata/terms.yaml", "testdata/catalog.json")
	require.NoError(t, err)
	got := rows(t, out)
	require.Equal(t, "chosen", got["ami-0a03"][1], out)
	require.Equal(t, "lost", got["ami-0a04"][1], out)
	require.Equal(t, "term 0: image is not in the pinned resolution", got["ami-0a04"][2])

	out, _, err = runCmd(t, "-now", now, "-previous", staging, "testdata/terms.yaml", "testdata/catalog.json")
	require.NoError(t, err)
	require.Contains(t, out, "what would change from the previous record (nodes on the old image drift):\n  amd64: ami-0a03 -> ami-0a04\n")
	require.NotContains(t, out, "arm64:")

	out, _, err = runCmd(t, "-now", now, "-min-age", "7d", "-previous", staging, "testdata/terms.yaml", "testdata/catalog.json")
	require.NoError(t, err)
	require.Contains(t, out, "no change from the previous record")
}

func TestInvalidTermsNameIndexAndField(t *testing.T) {
	_, stderr, err := runCmd(t, "testdata/invalid.yaml", "testdata/catalog.json")
	require.ErrorIs(t, err, amiselect.ErrInvalidTerm)
	require.ErrorContains(t, err, "2 invalid")
	require.Contains(t, stderr, "invalid: amiSelectorTerms[0].id: 'id' is mutually exclusive, cannot be set with name\n")
	require.Contains(t, stderr, "invalid: amiSelectorTerms[1].alias: ")
	var ae *amiselect.Error
	require.ErrorAs(t, err, &ae)
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	malformed := write("malformed.yaml", "- name: [unclosed\n")
	typo := write("typo.yaml", "- nmae: app-node-*\n")
	noTerms := write("noterms.yaml", "kind: EC2NodeClass\nspec:\n  role: x\n")
	badFamily := write("family.yaml", "spec:\n  amiFamily: Ubuntu\n  amiSelectorTerms:\n  - name: x\n")
	badCatalog := write("catalog.json", `{"Images": [{"ImageId": "not-an-ami"}]}`)
	badRecord := write("record.json", "{")
	tests := []struct {
		name string
		args []string
		want string
		is   error
	}{
		{"no arguments", nil, "want 2 arguments", nil},
		{"unknown flag", []string{"-bogus"}, "unknown flag: --bogus", nil},
		{"missing terms file", []string{"testdata/nope.yaml", "testdata/catalog.json"}, "nope.yaml", fs.ErrNotExist},
		{"missing catalog", []string{"testdata/terms.yaml", "testdata/nope.json"}, "nope.json", fs.ErrNotExist},
		{"malformed YAML", []string{malformed, "testdata/catalog.json"}, "malformed.yaml", nil},
		{"unknown term field", []string{typo, "testdata/catalog.json"}, `unknown field "nmae"`, nil},
		{"no amiSelectorTerms", []string{noTerms, "testdata/catalog.json"}, "spec.amiSelectorTerms", nil},
		{"unknown amiFamily", []string{badFamily, "testdata/catalog.json"}, "Ubuntu", amiselect.ErrInvalidFamily},
		{"bad catalog", []string{"testdata/terms.yaml", badCatalog}, "Images[0]", amiselect.ErrInvalidCatalog},
		{"bad pin record", []string{"-pin", badRecord, "testdata/terms.yaml", "testdata/catalog.json"}, "not a resolution record", nil},
		{"bad min age", []string{"-min-age", "-3h", "testdata/terms.yaml", "testdata/catalog.json"}, "--min-age", nil},
		{"bad now", []string{"-now", "yesterday", "testdata/terms.yaml", "testdata/catalog.json"}, "--now", nil},
		{"alias without version", []string{"testdata/nodeclass.yaml", "testdata/catalog.json"}, "pass --kubernetes-version", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := runCmd(t, tt.args...)
			require.Error(t, err)
			require.Contains(t, err.Error()+stderr, tt.want)
			if tt.is != nil {
				require.True(t, errors.Is(err, tt.is), "%v is not %v", err, tt.is)
			}
		})
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "7d": 7 * 24 * time.Hour, "0d": 0, "36h": 36 * time.Hour} {
		got, err := parseAge(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"d", "-1d", "1.5d", "x"} {
		_, err := parseAge(in)
		require.Error(t, err, in)
	}
}

func TestNodeClassFamilyMustAgreeWithAlias(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nodeclass.yaml")
	require.NoError(t, os.WriteFile(p, []byte("kind: EC2NodeClass\nspec:\n  amiFamily: Bottlerocket\n  amiSelectorTerms:\n  - alias: al2023@latest\n"), 0o644))
	_, stderr, err := runCmd(t, "-kubernetes-version", "1.31", p, "testdata/catalog.json")
	require.ErrorIs(t, err, amiselect.ErrInvalidFamily)
	require.Contains(t, stderr, "invalid: ")
	require.Contains(t, stderr, "amiFamily")
}
