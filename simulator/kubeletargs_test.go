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

func kubeletArgsPlan(t *testing.T, name string, rollback bool, desired ...kubeadm.KubeletArg) nodeexec.Plan {
	t.Helper()
	p, err := kubeadm.NewKubeletArgsPlan(kubeadm.KubeletArgsConfig{PlanName: name, Node: "w-0", Desired: desired, RollbackOnFailure: rollback})
	require.NoError(t, err)
	return p
}

// TestKubeletArgsPlanOnHost runs the kubelet-args plan on a Host through
// the Runner: the file is what the model writes, the kubelet runs with it,
// a second plan with the same arguments is skipped by the check, and a
// third one removes what the first added (from the record).
func TestKubeletArgsPlanOnHost(t *testing.T) {
	h, err := NewHost("w-0", strategy.RoleWorker, "v1.32.1")
	require.NoError(t, err)
	r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, []string{"--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--pod-infra-container-image=registry.k8s.io/pause:3.10"}, h.KubeletArgs())

	maxPods := kubeadm.KubeletArg{Name: "max-pods", Value: "250"}
	out, err := r.Run(context.Background(), kubeletArgsPlan(t, "args-1", false, maxPods))
	require.NoError(t, err, "%+v", out)
	want := `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --max-pods=250 --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n"
	got, _ := h.File(kubeadm.DefaultKubeadmFlagsFile)
	require.Equal(t, want, got)
	require.Contains(t, h.KubeletArgs(), "--max-pods=250")
	require.Equal(t, UnitActive, h.UnitState("kubelet"))

	out, err = r.Run(context.Background(), kubeletArgsPlan(t, "args-2", false, maxPods))
	require.NoError(t, err)
	require.Equal(t, nodeexec.StepStateSkipped, out.Steps[0].State)

	out, err = r.Run(context.Background(), kubeletArgsPlan(t, "args-3", false, kubeadm.KubeletArg{Name: "v", Value: "2"}))
	require.NoError(t, err, "%+v", out)
	require.NotContains(t, h.KubeletArgs(), "--max-pods=250", "removed: the record says an earlier plan added it")
	require.Contains(t, h.KubeletArgs(), "--v=2")
}

// TestKubeletArgsPlanRollsBackOnHost: a failed verification rolls the
// flags back and the kubelet runs with the old ones.
func TestKubeletArgsPlanRollsBackOnHost(t *testing.T) {
	f := NewFaults(1).FailStep("w-0", kubeadm.StepKubeletArgsVerify, 100)
	h, err := NewHost("w-0", strategy.RoleWorker, "v1.32.1", WithFaults(f))
	require.NoError(t, err)
	before := h.KubeletArgs()
	p := kubeletArgsPlan(t, "args", true, kubeadm.KubeletArg{Name: "max-pods", Value: "250"})
	for i := range p.Steps {
		p.Steps[i].Retry = nodeexec.RetryPolicy{}
	}
	r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	out, err := r.Run(context.Background(), p)
	require.ErrorIs(t, err, nodeexec.ErrRolledBack)
	require.Equal(t, nodeexec.PlanStateRolledBack, out.State)
	got, _ := h.File(kubeadm.DefaultKubeadmFlagsFile)
	require.Equal(t, defaultKubeadmFlags, got)
	_, ok := h.File(kubeadm.DefaultKubeletArgsRecordFile)
	require.False(t, ok, "no record of what was rolled back")
	require.Equal(t, before, h.KubeletArgs())
	require.Equal(t, UnitActive, h.UnitState("kubelet"))
}

// TestKubeletArgsPlanCompletesInPods: in both pod layouts the kubelet-args
// plan completes under a simulated kubelet, i.e. no container ends with
// the kubelet down.
func TestKubeletArgsPlanCompletesInPods(t *testing.T) {
	for _, layout := range podLayouts {
		t.Run(layout.name, func(t *testing.T) {
			h, err := NewHost("w-0", strategy.RoleWorker, "v1.32.1", fakeClock())
			require.NoError(t, err)
			plan := kubeletArgsPlan(t, "args", false, kubeadm.KubeletArg{Name: "max-pods", Value: "250"})
			// The pod stages the upgrader image as for any plan; this one
			// installs nothing from it.
			pr := newPodRunner(t, h, buildPod(t, plan, layout.opts), t.TempDir())
			res, err := pr.Run(context.Background())
			require.NoError(t, err)
			require.Equal(t, PodPhaseSucceeded, res.Phase, fmt.Sprintf("%+v", res))
			require.Contains(t, h.KubeletArgs(), "--max-pods=250")
		})
	}
}

func TestLearnsEveryKubeletArgsScript(t *testing.T) {
	kinds := map[kubeletArgsKind]bool{}
	for _, k := range knownKubeletArgsScripts() {
		kinds[k] = true
	}
	require.Len(t, kinds, int(scriptKubeletArgsVerify), "every script kind was found in the library's plan")
}
