package capi

import (
	"testing"

	"github.com/stretchr/testify/require"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// TestDesiredFilesOnlyThoseItMayWrite: the files an update writes are the
// inline ones kubeadm.ValidateFile allows; a file outside the allowed
// directories or with a setuid mode (which FilesCheck declines to change)
// is left as the node has it, instead of making every update's plan fail.
func TestDesiredFilesOnlyThoseItMayWrite(t *testing.T) {
	spec := &bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{
		{Path: "/etc/motd", Content: "hello"},
		{Path: "/etc/systemd/system/kubelet.service.d/20-x.conf", Content: "[Service]"},
		{Path: "/etc/kubernetes/tool", Content: "x", Permissions: "4755"},
		{Path: "/etc/kubernetes/audit-policy.yaml", Content: "rules: []"},
	}}
	got := desiredFiles(spec)
	require.Equal(t, []kubeadm.File{{Path: "/etc/kubernetes/audit-policy.yaml", Content: []byte("rules: []")}}, got.files)
	require.NotEmpty(t, got.digest)
	_, err := withFiles(planForFilesTest(t), got, "")
	require.NoError(t, err)
}

func planForFilesTest(t *testing.T) nodeexec.Plan {
	t.Helper()
	p, err := kubeadm.NewPlan(kubeadm.Config{PlanName: "kubeadm-x", Node: "n1", Role: kubeadm.RoleWorker, FromVersion: "v1.36.0", ToVersion: "v1.36.1"})
	require.NoError(t, err)
	return p
}
