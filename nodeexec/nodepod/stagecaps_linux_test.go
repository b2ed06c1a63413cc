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
