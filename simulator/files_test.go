package simulator

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

func filesPlan(t *testing.T, name string, rollback bool, files ...kubeadm.File) nodeexec.Plan {
	t.Helper()
	p, err := kubeadm.NewFilesPlan(kubeadm.FilesConfig{PlanName: name, Node: "w-0", Files: files, RollbackOnFailure: rollback})
	require.NoError(t, err)
	return p
}

// TestFilesPlanOnHost: the files plan writes the files with their mode and
// owner, a second plan with the same files is skipped by the check, and a
// failed verification puts back what was there.
func TestFilesPlanOnHost(t *testing.T) {
	h, err := NewHost("w-0", strategy.RoleWorker, "v1.32.1")
	require.NoError(t, err)
	h.WriteFile("/etc/kubernetes/example/existing.conf", "old")
	r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	files := []kubeadm.File{
		{Path: "/etc/kubernetes/example/existing.conf", Content: []byte("new"), Permissions: "0640"},
		{Path: "/etc/kubernetes/example/created.conf", Content: []byte("made"), Owner: "0"},
	}
	out, err := r.Run(context.Background(), filesPlan(t, "files-1", false, files...))
	require.NoError(t, err, "%+v", out)
	got, _ := h.File("/etc/kubernetes/example/existing.conf")
	require.Equal(t, "new", got)
	mode, owner := h.FileAttrs("/etc/kubernetes/example/existing.conf")
	require.Equal(t, "640", mode)
	require.Equal(t, "root:root", owner)

	out, err = r.Run(context.Background(), filesPlan(t, "files-2", false, files...))
	require.NoError(t, err)
	require.Equal(t, nodeexec.StepStateSkipped, out.Steps[0].State)

	f := NewFaults(1).FailStep("w-0", kubeadm.StepFilesVerify, 100)
	h2, err := NewHost("w-0", strategy.RoleWorker, "v1.32.1", WithFaults(f))
	require.NoError(t, err)
	h2.WriteFile("/etc/kubernetes/example/existing.conf", "old")
	r2, err := nodeexec.NewRunner(h2, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	p := filesPlan(t, "files-3", true, files...)
	for i := range p.Steps {
		p.Steps[i].Retry = nodeexec.RetryPolicy{}
	}
	out, err = r2.Run(context.Background(), p)
	require.ErrorIs(t, err, nodeexec.ErrRolledBack, "%+v", out)
	got, _ = h2.File("/etc/kubernetes/example/existing.conf")
	require.Equal(t, "old", got)
	_, ok := h2.File("/etc/kubernetes/example/created.conf")
	require.False(t, ok, "a file that did not exist is removed again")
}

// TestFilesPlanCompletesInPods: in both pod layouts the files plan
// completes under a simulated kubelet.
func TestFilesPlanCompletesInPods(t *testing.T) {
	for _, layout := range podLayouts {
		t.Run(layout.name, func(t *testing.T) {
			h, err := NewHost("w-0", strategy.RoleWorker, "v1.32.1", fakeClock())
			require.NoError(t, err)
			plan := filesPlan(t, "files", false, kubeadm.File{Path: "/etc/kubernetes/example/a.conf", Content: []byte("a")})
			pr := newPodRunner(t, h, buildPod(t, plan, layout.opts), t.TempDir())
			res, err := pr.Run(context.Background())
			require.NoError(t, err)
			require.Equal(t, PodPhaseSucceeded, res.Phase, fmt.Sprintf("%+v", res))
			got, _ := h.File("/etc/kubernetes/example/a.conf")
			require.Equal(t, "a", got)
		})
	}
}

func TestLearnsEveryFilesScript(t *testing.T) {
	kinds := map[filesKind]bool{}
	for _, k := range knownFilesScripts() {
		kinds[k] = true
	}
	require.Len(t, kinds, int(scriptFilesRollback), "every script kind was found in the library's plan")
}
