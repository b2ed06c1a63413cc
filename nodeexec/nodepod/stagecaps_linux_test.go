package nodepod

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStageCapabilitiesAreEnough runs the stage container's own command
// as root under a bounding set of exactly stageCapabilities() and checks
// that it reproduces a tree with foreign owners and a setuid binary, and
// that it can re-stage over its previous copy (files owned by another
// user in read-only directories), leaving nothing of the previous copy
// behind. With no capability it must fail, so
// the test proves the capabilities are needed, not just allowed.
func TestStageCapabilitiesAreEnough(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (it checks capability sets)")
	}
	setpriv, err := exec.LookPath("setpriv")
	require.NoError(t, err)

	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "bin"), 0o755))
	suid := filepath.Join(src, "bin", "tool")
	require.NoError(t, os.WriteFile(suid, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.Chown(suid, 1000, 1000))
	require.NoError(t, os.Chmod(suid, os.ModeSetuid|0o755))
	ro := filepath.Join(src, "ro")
	require.NoError(t, os.MkdirAll(ro, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ro, "f"), []byte("x"), 0o400))
	require.NoError(t, os.Chown(filepath.Join(ro, "f"), 1000, 1000))
	require.NoError(t, os.Chown(ro, 1000, 1000))
	require.NoError(t, os.Chmod(ro, 0o555))

	pod, err := Build(testPlan(), WithImage("i"), WithStageFrom(src))
	require.NoError(t, err)
	stage := pod.Spec.InitContainers[0]
	require.Equal(t, StageContainer, stage.Name)

	bounding := func(caps []string) string {
		s := "-all"
		for _, c := range caps {
			s += ",+" + strings.ToLower(c)
		}
		return s
	}
	run := func(dst string, caps []string) error {
		argv := append([]string(nil), stage.Command...)
		argv[len(argv)-1] = dst // the staging destination, here a temp dir
		cmd := exec.Command(setpriv, append([]string{"--bounding-set", bounding(caps), "--inh-caps", "-all", "--"}, argv...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("stage with %v: %v: %s", caps, err, out)
		}
		return err
	}
	var caps []string
	for _, c := range stage.SecurityContext.Capabilities.Add {
		caps = append(caps, string(c))
	}

	dst := filepath.Join(t.TempDir(), "staging")
	require.NoError(t, run(dst, caps), "first stage")
	stale := filepath.Join(dst, "ro", "from-an-older-bundle")
	require.NoError(t, os.Chmod(filepath.Join(dst, "ro"), 0o755))
	require.NoError(t, os.WriteFile(stale, []byte("old"), 0o600))
	require.NoError(t, os.Chmod(filepath.Join(dst, "ro"), 0o555))
	require.NoError(t, run(dst, caps), "re-stage over the previous copy")
	_, err = os.Stat(stale)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing of an older bundle is left to be installed")
	fi, err := os.Stat(filepath.Join(dst, "bin", "tool"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755)|os.ModeSetuid, fi.Mode())

	require.Error(t, run(filepath.Join(t.TempDir(), "staging"), nil), "with no capability the copy fails")
}

// TestStageKeepsItsMountPoint runs the stage container's command the way a
// real kubelet runs it: its destination is a subPath mount point (here a
// bind mount in a private mount namespace). Removing the directory itself
// fails there with "Device or resource busy" (the pod then crash-loops on
// every real kubelet); the stage must empty it instead, hidden entries
// too, and copy the new bundle in.
func TestStageKeepsItsMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (it mounts)")
	}
	src, dst, backing := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "kubernetes"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "kubernetes", "kubeadm"), []byte("new"), 0o755))
	// The previous bundle, with entries the new one lacks.
	for _, f := range []string{"old", ".hidden", "..dots", "containerd/usr/bin/containerd"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(backing, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(backing, f), []byte("previous"), 0o644))
	}
	require.NoError(t, os.Symlink("/nonexistent", filepath.Join(backing, "dangling")))

	pod, err := Build(testPlan(), WithImage("i"), WithStageFrom(src))
	require.NoError(t, err)
	stage := pod.Spec.InitContainers[0]
	require.Equal(t, StageContainer, stage.Name)
	argv := append([]string(nil), stage.Command...)
	argv[len(argv)-1] = dst
	// mount --bind backing dst, then the container's command, in a mount
	// namespace of its own (nothing leaks to the machine's).
	script := `set -e; mount --bind "$1" "$2"; shift 2; exec "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", backing, dst}, argv...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "stage on a mount point: %s", out)

	var got []string
	require.NoError(t, filepath.WalkDir(backing, func(p string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		if !d.IsDir() {
			rel, _ := filepath.Rel(backing, p)
			got = append(got, rel)
		}
		return nil
	}))
	require.Equal(t, []string{"kubernetes/kubeadm"}, got, "the previous bundle is gone, the new one is in place")
}
