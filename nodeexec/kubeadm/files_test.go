package kubeadm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec"
)

func TestNewFilesPlanRefuses(t *testing.T) {
	ok := File{Path: "/etc/kubernetes/audit-policy.yaml", Content: []byte("a")}
	at := func(p string) FilesConfig {
		return FilesConfig{Node: "n", Files: []File{{Path: p, Content: []byte("x")}}}
	}
	mode := func(m string) FilesConfig {
		return FilesConfig{Node: "n", Files: []File{{Path: "/etc/sysctl.d/99-k8s.conf", Permissions: m}}}
	}
	for _, tc := range []struct {
		name  string
		cfg   FilesConfig
		field string
	}{
		{"no files", FilesConfig{Node: "n"}, "files"},
		{"relative path", at("etc/x"), "files[0].path"},
		{"unclean path", at("/etc/../etc/x"), "files[0].path"},
		{"kubeadm's keys", at("/etc/kubernetes/pki/ca.key"), "files[0].path"},
		{"kubeadm's kubeconfig", at("/etc/kubernetes/admin.conf"), "files[0].path"},
		{"kubeadm's manifests", at("/etc/kubernetes/manifests/kube-apiserver.yaml"), "files[0].path"},
		{"kubeadm's backups", at("/etc/kubernetes/tmp/x"), "files[0].path"},
		{"upgradekit's own", at("/var/lib/upgradekit/staging/x"), "files[0].path"},
		// Outside the default allowlist.
		{"sudoers", at("/etc/sudoers.d/upgradekit"), "files[0].path"},
		{"root's SSH keys", at("/root/.ssh/authorized_keys"), "files[0].path"},
		{"a kubelet drop-in", at("/etc/systemd/system/kubelet.service.d/10-x.conf"), "files[0].path"},
		{"a kubelet drop-in under /usr/lib", at("/usr/lib/systemd/system/kubelet.service.d/10-x.conf"), "files[0].path"},
		{"ld.so.preload", at("/etc/ld.so.preload"), "files[0].path"},
		{"the kubeadm the plan runs", at("/usr/bin/kubeadm"), "files[0].path"},
		{"shadow", at("/etc/shadow"), "files[0].path"},
		{"containerd's config", at("/etc/containerd/config.toml"), "files[0].path"},
		{"an allowed directory itself", at("/etc/sysctl.d"), "files[0].path"},
		{"a sibling of an allowed directory", at("/etc/sysctl.d.evil/x"), "files[0].path"},
		{"twice", FilesConfig{Node: "n", Files: []File{ok, ok}}, "files[1].path"},
		{"mode", mode("rw-r--r--"), "files[0].permissions"},
		{"setuid", mode("4755"), "files[0].permissions"},
		{"setgid", mode("2755"), "files[0].permissions"},
		{"sticky", mode("1644"), "files[0].permissions"},
		{"group-writable", mode("0664"), "files[0].permissions"},
		{"world-writable", mode("0646"), "files[0].permissions"},
		{"owner", FilesConfig{Node: "n", Files: []File{{Path: "/etc/kubernetes/x", Owner: "root; rm -rf /"}}}, "files[0].owner"},
		{"too much content", FilesConfig{Node: "n", Files: []File{{Path: "/etc/kubernetes/x", Content: make([]byte, MaxFilesContent+1)}}}, "files"},
		{"node", FilesConfig{Node: "N!", Files: []File{ok}}, "node"},
		{"allowed dir relative", FilesConfig{Node: "n", Files: []File{ok}, AllowedDirs: []string{"etc"}}, "allowedDirs[0]"},
		{"allowed dir /", FilesConfig{Node: "n", Files: []File{ok}, AllowedDirs: []string{"/etc", "/"}}, "allowedDirs[1]"},
		{"allowed dir unclean", FilesConfig{Node: "n", Files: []File{ok}, AllowedDirs: []string{"/etc/"}}, "allowedDirs[0]"},
		{"allowed dir protected", FilesConfig{Node: "n", Files: []File{ok}, AllowedDirs: []string{"/etc/kubernetes/pki"}}, "allowedDirs[0]"},
		{"protected in an allowed dir", FilesConfig{Node: "n", Files: []File{{Path: "/etc/kubernetes/pki/ca.key"}}, AllowedDirs: []string{"/etc"}}, "files[0].path"},
		{"outside the operator's allowlist", FilesConfig{Node: "n", Files: []File{ok}, AllowedDirs: []string{"/etc/sysctl.d"}}, "files[0].path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFilesPlan(tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), "kubeadm: "+tc.field+":")
		})
	}
}

// TestNewFilesPlanAllows: the default allowlist takes the usual files of
// a KubeadmConfig, and an operator's allowlist replaces it.
func TestNewFilesPlanAllows(t *testing.T) {
	for _, tc := range []struct {
		path, mode string
		allowed    []string
	}{
		{"/etc/kubernetes/audit-policy.yaml", "0600", nil},
		{"/etc/kubernetes/admission/config.yaml", "0644", nil},
		{"/etc/sysctl.d/99-kubernetes.conf", "", nil},
		{"/etc/modules-load.d/k8s.conf", "0644", nil},
		{"/etc/containerd/certs.d/registry.example/hosts.toml", "0644", nil},
		{"/etc/motd", "0644", []string{"/etc/containerd", "/etc"}},
		{"/opt/tools/run.sh", "0755", []string{"/opt/tools"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			_, err := NewFilesPlan(FilesConfig{Node: "n", Files: []File{{Path: tc.path, Permissions: tc.mode}}, AllowedDirs: tc.allowed})
			require.NoError(t, err)
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
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	existing := filepath.Join(dir, "etc", "existing.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(existing), 0o755))
	require.NoError(t, os.WriteFile(existing, []byte("old\n"), 0o600))
	created := filepath.Join(dir, "etc", "new", "created.conf")
	files := []File{
		{Path: existing, Content: []byte("new\n"), Permissions: "0640", Owner: "root:root"},
		{Path: created, Content: []byte("binary \x00\xff 'quoted' $(not run)\n"), Permissions: "600", Owner: "0"},
	}
	r, err := nodeexec.NewRunner(nodeexec.OSExecutor{}, nodeexec.RunnerOptions{JournalDir: filepath.Join(dir, "journal"), Direct: true})
	require.NoError(t, err)

	plan, err := NewFilesPlan(FilesConfig{PlanName: "files-1", Node: "n", Files: files, BackupDir: filepath.Join(dir, "backup-1"), AllowedDirs: []string{dir}})
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
	require.Equal(t, nodeexec.StepStateSkipped, out.Steps[0].State, "already as desired: skipped by the check")

	// A verification that fails (another checksum expected) rolls back.
	require.NoError(t, os.WriteFile(existing, []byte("old\n"), 0o600))
	require.NoError(t, os.Chmod(existing, 0o600))
	require.NoError(t, os.Remove(created))
	bad, err := NewFilesPlan(FilesConfig{PlanName: "files-3", Node: "n", Files: files, BackupDir: filepath.Join(dir, "backup-3"), RollbackOnFailure: true,
		AllowedDirs: []string{dir}})
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

// TestFilesPlanRefusesOnThisHost runs the files plan's scripts for real (as
// root, without nsenter) in a temporary directory that the allowlist points
// into: a symbolic link on the way to a file (which led the write script
// into a directory the plan must not write), a file that is a link, and a
// directory where the file goes are refused on the host before anything is
// backed up or written, and what they point at is left unchanged.
func TestFilesPlanRefusesOnThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (it chowns files)")
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	allowed, protected := filepath.Join(dir, "allowed"), filepath.Join(dir, "protected")
	caKey := filepath.Join(protected, "ca.key")
	require.NoError(t, os.MkdirAll(allowed, 0o755))
	require.NoError(t, os.MkdirAll(protected, 0o700))
	require.NoError(t, os.WriteFile(caKey, []byte("the cluster's CA key"), 0o600))
	require.NoError(t, os.Symlink(protected, filepath.Join(allowed, "evil")))
	require.NoError(t, os.Symlink(caKey, filepath.Join(allowed, "link.conf")))
	tree := filepath.Join(allowed, "tree")
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "sub", "f"), []byte("f"), 0o644))

	unchanged := func(t *testing.T) {
		t.Helper()
		got, err := os.ReadFile(caKey)
		require.NoError(t, err)
		require.Equal(t, "the cluster's CA key", string(got))
		entries, err := os.ReadDir(protected)
		require.NoError(t, err)
		require.Len(t, entries, 1, "nothing was created beside it")
		fi, err := os.Lstat(filepath.Join(allowed, "link.conf"))
		require.NoError(t, err)
		require.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the link is still a link")
		fi, err = os.Lstat(tree)
		require.NoError(t, err)
		require.True(t, fi.IsDir(), "the directory is still one")
	}
	plan := func(t *testing.T, name string, p string) nodeexec.Plan {
		t.Helper()
		ok := File{Path: filepath.Join(allowed, "ok.conf"), Content: []byte("ok")}
		pl, err := NewFilesPlan(FilesConfig{PlanName: name, Node: "n", BackupDir: filepath.Join(dir, "backup", name), AllowedDirs: []string{allowed},
			Files: []File{ok, {Path: p, Content: []byte("attacker's"), Permissions: "0644"}}})
		require.NoError(t, err)
		return pl
	}
	sh := func(t *testing.T, argv []string, env []nodeexec.EnvVar) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
		cmd.Env = os.Environ()
		for _, e := range env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	r, err := nodeexec.NewRunner(nodeexec.OSExecutor{}, nodeexec.RunnerOptions{JournalDir: filepath.Join(dir, "journal"), Direct: true})
	require.NoError(t, err)

	for i, tc := range []struct{ name, path, want string }{
		{"a symbolic link to the parent", filepath.Join(allowed, "evil", "ca.key"), "a symbolic link on the way"},
		{"a symbolic link further up", filepath.Join(allowed, "evil", "new", "x.conf"), "a symbolic link on the way"},
		{"the file is a symbolic link", filepath.Join(allowed, "link.conf"), "is a symbolic link"},
		{"the file is a directory", tree, "is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plan(t, fmt.Sprintf("files-%d", i), tc.path)
			st := p.Steps[0]

			// The write script alone refuses, before the first file too.
			out, err := sh(t, st.Argv, st.Env)
			require.Error(t, err, out)
			require.Contains(t, out, tc.want)
			unchanged(t)
			_, err = os.Stat(filepath.Join(allowed, "ok.conf"))
			require.ErrorIs(t, err, os.ErrNotExist, "no file is written when one is refused")

			// So does the backup, before it copies anything, and the
			// rollback and the verification.
			for _, argv := range [][]string{st.Backup, st.Rollback, p.Steps[1].Argv} {
				out, err = sh(t, argv, nil)
				require.Error(t, err, out)
				require.Contains(t, out, tc.want)
			}
			_, err = os.Stat(filepath.Join(dir, "backup", p.Name))
			require.ErrorIs(t, err, os.ErrNotExist, "nothing was backed up")
			unchanged(t)

			// The plan fails at the backup.
			res, err := r.Run(t.Context(), p)
			require.ErrorIs(t, err, nodeexec.ErrStepFailed, "%+v", res)
			require.Equal(t, nodeexec.PhaseBackup, res.Failure.Phase)
			require.Contains(t, res.Failure.Output, tc.want)
			unchanged(t)
		})
	}

	t.Run("a protected prefix", func(t *testing.T) {
		// Only the verification, which writes nothing, runs against a
		// real protected path.
		p := plan(t, "files-proc", filepath.Join(allowed, "x.conf"))
		argv := slices.Clone(p.Steps[1].Argv)
		i := slices.Index(argv, filepath.Join(allowed, "x.conf"))
		argv[i] = "/proc/version"
		out, err := sh(t, argv, nil)
		require.Error(t, err, out)
		require.Contains(t, out, "/proc/version is under /proc")
	})
}
