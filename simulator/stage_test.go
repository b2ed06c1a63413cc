package simulator

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

// TestStageReplacesThePreviousBundle: like the stage container's script,
// the simulated kubelet removes the previous bundle before staging the
// image's, so a component the new bundle does not carry is not installed
// from an older one.
func TestStageReplacesThePreviousBundle(t *testing.T) {
	h, err := NewHost("w-0", strategy.RoleWorker, "v1.30.4", fakeClock())
	require.NoError(t, err)
	h.Stage(Staging{Kubernetes: "v1.31.1", Containerd: "2.0.5"})
	require.NotEmpty(t, h.Files(kubeadm.DefaultStagingDir+"/containerd"))

	plan := kubeletArgsPlan(t, "args", false, kubeadm.KubeletArg{Name: "max-pods", Value: "250"})
	pr, err := NewPodRunner(h, buildPod(t, plan, nil), WithPodJournalDir(t.TempDir()), WithPodImageStaging(Staging{Kubernetes: "v1.32.0"}))
	require.NoError(t, err)
	_, err = pr.Run(t.Context())
	require.NoError(t, err)
	require.Empty(t, h.Files(kubeadm.DefaultStagingDir+"/containerd"), "the older bundle's containerd is gone")
	kubelet, _ := h.File(kubeadm.DefaultStagingDir + "/kubernetes/kubelet")
	require.Equal(t, binary(ComponentKubelet, "v1.32.0"), kubelet)
}
