package kubeadm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeEtcdctl stands in for etcdctl: it checks it was asked for a snapshot,
// writes one world-readable (as a careless etcdctl could) and exits with
// code.
const fakeEtcdctl = `#!/bin/sh
set -eu
[ "$ETCDCTL_API" = 3 ] || exit 3
for last in "$@"; do :; done
case "$*" in *"snapshot save $last") ;; *) exit 4 ;; esac
[ "%s" = ok ] || { echo "Error: context deadline exceeded" >&2; exit 1; }
printf 'snapshot\n' > "$last"
chmod 644 "$last"
`

// TestEtcdSnapshotsAreKeptPrivateAndFew runs the etcd snapshot step's
// script for real with a fake etcdctl: the snapshot and a new backup
// directory are root-only, other plans' snapshots beyond KeepEtcdSnapshots
// (newest kept) are removed after the save, anything not named like a plan
// and other backups stay, and a failed save removes nothing.
func TestEtcdSnapshotsAreKeptPrivateAndFew(t *testing.T) {
	root := t.TempDir() // stands in for /var/lib/upgradekit/backup
	staging := t.TempDir()
	etcdctl := filepath.Join(staging, "etcd", "etcdctl")
	require.NoError(t, os.MkdirAll(filepath.Dir(etcdctl), 0o755))
	old := time.Now().Add(-time.Hour)
	for i, d := range []string{"kubeadm-a", "kubeadm-b", "kubeadm-c", "kubeadm-d", "Not A Plan"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d, "bin"), 0o700))
		snap := filepath.Join(root, d, "etcd-snapshot.db")
		require.NoError(t, os.WriteFile(snap, []byte(d), 0o600))
		at := old.Add(time.Duration(i) * time.Minute) // a oldest, d newest
		require.NoError(t, os.Chtimes(snap, at, at))
	}
	// The directories' times say the opposite: the snapshots' count.
	for i, d := range []string{"kubeadm-d", "kubeadm-c", "kubeadm-b", "kubeadm-a"} {
		at := old.Add(time.Duration(i) * time.Minute)
		require.NoError(t, os.Chtimes(filepath.Join(root, d), at, at))
	}
	exists := func(p ...string) bool {
		_, err := os.Stat(filepath.Join(append([]string{root}, p...)...))
		return err == nil
	}
	run := func(t *testing.T, plan, etcd string, keep int) ([]byte, error) {
		t.Helper()
		require.NoError(t, os.WriteFile(etcdctl, []byte(fmt.Sprintf(fakeEtcdctl, etcd)), 0o755))
		p, err := NewPlan(Config{PlanName: plan, Node: "cp-0", Role: RoleFirstControlPlane, FromVersion: "v1.31.0", ToVersion: "v1.31.1",
			StagingDir: staging, BackupDir: filepath.Join(root, plan), PKIDir: t.TempDir(), KeepEtcdSnapshots: keep})
		require.NoError(t, err)
		argv := step(t, p, StepEtcdSnapshot).Argv
		return exec.CommandContext(t.Context(), argv[0], argv[1:]...).CombinedOutput()
	}

	t.Run("a failed save removes nothing", func(t *testing.T) {
		out, err := run(t, "kubeadm-failed", "fail", 1)
		require.Error(t, err, string(out))
		for _, d := range []string{"kubeadm-a", "kubeadm-b", "kubeadm-c", "kubeadm-d"} {
			require.True(t, exists(d, "etcd-snapshot.db"), d)
		}
	})
	t.Run("keep 3", func(t *testing.T) {
		out, err := run(t, "kubeadm-new", "ok", 3)
		require.NoError(t, err, string(out))
		snap := filepath.Join(root, "kubeadm-new", "etcd-snapshot.db")
		fi, err := os.Stat(snap)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the snapshot is root-only")
		fi, err = os.Stat(filepath.Dir(snap))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "so is the backup directory it made")

		require.True(t, exists("kubeadm-d", "etcd-snapshot.db"), "the two newest earlier snapshots are kept (3 with this one)")
		require.True(t, exists("kubeadm-c", "etcd-snapshot.db"))
		require.False(t, exists("kubeadm-b", "etcd-snapshot.db"))
		require.False(t, exists("kubeadm-a", "etcd-snapshot.db"))
		require.True(t, exists("kubeadm-a", "bin"), "other backups stay")
		require.True(t, exists("Not A Plan", "etcd-snapshot.db"), "only plan-named directories are touched")
	})
	t.Run("the default keeps 2", func(t *testing.T) {
		out, err := run(t, "kubeadm-newer", "ok", 0)
		require.NoError(t, err, string(out))
		require.True(t, exists("kubeadm-newer", "etcd-snapshot.db"))
		require.True(t, exists("kubeadm-new", "etcd-snapshot.db"))
		require.False(t, exists("kubeadm-d", "etcd-snapshot.db"))
		require.False(t, exists("kubeadm-c", "etcd-snapshot.db"))
	})

	_, err := NewPlan(Config{PlanName: "p", Node: "cp-0", Role: RoleFirstControlPlane, FromVersion: "v1.31.0", ToVersion: "v1.31.1", KeepEtcdSnapshots: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "keepEtcdSnapshots")
}
