package kubeadm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec"
)

func TestNewFilesPlanRefuses(t *testing.T) {
	ok := File{Path: "/etc/example/a.conf", Content: []byte("a")}
	for _, tc := range []struct {
		name  string
		cfg   FilesConfig
		field string
	}{
		{"no files", FilesConfig{Node: "n"}, "files"},
		{"relative path", FilesConfig{Node: "n", Files: []File{{Path: "etc/x"}}}, "files[0].path"},
		{"unclean path", FilesConfig{Node: "n", Files: []File{{Path: "/etc/../etc/x"}}}, "files[0].path"},
		{"kubeadm's keys", FilesConfig{Node: "n", Files: []File{{Path: "/etc/kubernetes/pki/ca.key"}}}, "files[0].path"},
		{"upgradekit's own", FilesConfig{Node: "n", Files: []File{{Path: "/var/lib/upgradekit/staging/x"}}}, "files[0].path"},
		{"twice", FilesConfig{Node: "n", Files: []File{ok, ok}}, "files[1].path"},
		{"mode", FilesConfig{Node: "n", Files: []File{{Path: "/etc/x", Permissions: "rw-r--r--"}}}, "files[0].permissions"},
		{"owner", FilesConfig{Node: "n", Files: []File{{Path: "/etc/x", Owner: "root; rm -rf /"}}}, "files[0].owner"},
		{"too much content", FilesConfig{Node: "n", Files: []File{{Path: "/etc/x", Content: make([]byte, MaxFilesContent+1)}}}, "files"},
		{"node", FilesConfig{Node: "N!", Files: []File{ok}}, "node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFilesPlan(tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), "kubeadm: "+tc.field+":")
		})
	}
}

// TestFilesPlanOnThisHost runs the plan's real scripts (as root, without
// nsenter) against a temporary directory: files are written with their
// mode and owner and verified, a second run is skipped by the check, and a
// failed verification rolls back to what was there (a file that did not
// exist is removed).
func TestFilesPlanOnThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (it chowns files)")
	}
	dir := t.TempDir()
	existing := filepath.Join(dir, "etc", "existing.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(existing), 0o755))
	require.NoError(t, os.WriteFile(existing, []byte("old\n"), 0o600))
	created := filepath.Join(dir, "etc", "new", "created.conf")
	files := []File{
		{Path: existing, Content: []byte("new\n"), Permissions: "0640", Owner: "root:root"},
		{Path: created, Content: []byte("binary \x00\xff 'quoted' $(not run)\n"), Permissions: "600", Owner: "0"},
	}
	r, err := nodeexec.NewRunner(nodeexec.OSExecutor{}, nodeexec.WithJournalDir(filepath.Join(dir, "journal")), nodeexec.WithDirect())
	require.NoError(t, err)

	plan, err := NewFilesPlan(FilesConfig{PlanName: "files-1", Node: "n", Files: files, BackupDir: filepath.Join(dir, "backup-1")})
	require.NoError(t, err)
	out, err := r.Run(t.Context(), plan)
	require.NoError(t, err, "%+v", out)
	for _, f := range files {
		got, err := os.ReadFile(f.Path)
		require.NoError(t, err)
		require.Equal(t, f.Content, got)
	}
	fi, err := os.Stat(existing)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	fi, err = os.Stat(created)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	leftovers, _ := filepath.Glob(filepath.Join(dir, "etc", "*.upgradekit.*"))
	require.Empty(t, leftovers, "no temporary file left")

	plan.Name = "files-2"
	out, err = r.Run(t.Context(), plan)
	require.NoError(t, err)
	require.Equal(t, nodeexec.StepSkipped, out.Steps[0].State, "already as desired: skipped by the check")

	// A verification that fails (another checksum expected) rolls back.
	require.NoError(t, os.WriteFile(existing, []byte("old\n"), 0o600))
	require.NoError(t, os.Chmod(existing, 0o600))
	require.NoError(t, os.Remove(created))
	bad, err := NewFilesPlan(FilesConfig{PlanName: "files-3", Node: "n", Files: files, BackupDir: filepath.Join(dir, "backup-3"), RollbackOnFailure: true})
	require.NoError(t, err)
	v := bad.Steps[1].Argv
	for i, a := range v {
		if len(a) == 64 && !strings.ContainsAny(a, "/ ") {
			v[i] = strings.Repeat("0", 64)
		}
	}
	bad.Steps[1].Retry = nodeexec.RetryPolicy{}
	out, err = r.Run(t.Context(), bad)
	require.ErrorIs(t, err, nodeexec.ErrRolledBack, "%+v", out)
	require.Contains(t, out.Steps[1].Output, "has content sha256")
	got, err := os.ReadFile(existing)
	require.NoError(t, err)
	require.Equal(t, "old\n", string(got), "the previous content is back")
	fi, err = os.Stat(existing)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "with its mode")
	_, err = os.Stat(created)
	require.ErrorIs(t, err, os.ErrNotExist, "a file that did not exist is removed again")
}
