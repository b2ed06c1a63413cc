package simulator

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// clusterConfigurationV1beta4 is kubeadm-config as KubeadmControlPlane
// writes it after an API server argument and etcd image change.
const clusterConfigurationV1beta4 = `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.30.4
apiServer:
  extraArgs:
  - name: audit-log-maxage
    value: "30"
  - name: tls-cipher-suites
    value: "TLS_AES_128_GCM_SHA256: x"
etcd:
  local:
    imageTag: 3.5.16-0
    extraArgs:
    - name: quota-backend-bytes
      value: "8589934592"
`

// cpHost is one control plane host of a fake cluster, whose client holds
// its Node and (if cc is not "") kube-system/kubeadm-config.
func cpHost(t *testing.T, cc string, opts ...HostOption) (*Host, client.Client) {
	t.Helper()
	cl := NewCluster("c").ControlPlane(1, "v1.30.4")
	c, err := cl.Client()
	require.NoError(t, err)
	if cc != "" {
		require.NoError(t, c.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
			Data: map[string]string{"ClusterConfiguration": cc}}))
	}
	f, err := NewFleet(cl, append([]HostOption{WithNodeClient(c), fakeClock()}, opts...)...)
	require.NoError(t, err)
	return f.Hosts()[0], c
}

func cpConfigPlan(t *testing.T, node string, expect ...kubeadm.ManifestExpectation) nodeexec.Plan {
	t.Helper()
	p, err := kubeadm.NewControlPlaneConfigPlan(kubeadm.ControlPlaneConfig{Node: node, Expect: expect})
	require.NoError(t, err)
	for i := range p.Steps {
		p.Steps[i].Retry = nodeexec.RetryPolicy{}
	}
	return p
}

var wantCPConfig = []kubeadm.ManifestExpectation{
	{Component: "kube-apiserver", Args: []kubeadm.KubeletArg{{Name: "audit-log-maxage", Value: "30"}}},
	{Component: "kube-controller-manager"},
	{Component: "kube-scheduler"},
	{Component: "etcd", ImageTag: "3.5.16-0", Args: []kubeadm.KubeletArg{{Name: "quota-backend-bytes", Value: "8589934592"}}},
}

// TestControlPlaneConfigPlanOnHost: the control plane configuration plan
// renders the manifests from kubeadm-config and the verification finds the
// arguments, the etcd image and Ready mirror pods; a value YAML must quote
// is rendered quoted, as kubeadm does, and so is not found by the
// verification's fixed-string match.
func TestControlPlaneConfigPlanOnHost(t *testing.T) {
	h, c := cpHost(t, clusterConfigurationV1beta4)
	before := h.StaticPodCommand("kube-apiserver")
	require.NotContains(t, before, "--audit-log-maxage=30")

	r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	out, err := r.Run(t.Context(), cpConfigPlan(t, h.Node(), wantCPConfig...))
	require.NoError(t, err, "%+v", out)
	require.Contains(t, h.StaticPodCommand("kube-apiserver"), "--audit-log-maxage=30")
	require.Contains(t, h.StaticPodCommand("etcd"), "--quota-backend-bytes=8589934592")
	require.Equal(t, "registry.k8s.io/etcd:3.5.16-0", h.StaticPodImage("etcd"))
	require.Equal(t, "3.5.16-0", h.Version(ComponentEtcd))
	require.Equal(t, "v1.30.4", h.Version(ComponentControlPlane), "same version: only the configuration changed")
	var mirror corev1.Pod
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "etcd-" + h.Node()}, &mirror))
	require.Equal(t, "registry.k8s.io/etcd:3.5.16-0", mirror.Spec.Containers[0].Image, "the kubelet replaced the mirror pod")
	backup, _ := h.File("/var/lib/upgradekit/backup/" + out.Plan + "/manifests/kube-apiserver.yaml")
	require.NotContains(t, backup, "audit-log-maxage", "the backup is the manifest before the change")

	quoted := cpConfigPlan(t, h.Node(), kubeadm.ManifestExpectation{Component: "kube-apiserver",
		Args: []kubeadm.KubeletArg{{Name: "tls-cipher-suites", Value: "TLS_AES_128_GCM_SHA256: x"}}})
	quoted.Name = "quoted"
	out, err = r.Run(t.Context(), quoted)
	require.Error(t, err, "%+v", out)
	require.Contains(t, out.Steps[1].Output, "has no argument --tls-cipher-suites=TLS_AES_128_GCM_SHA256: x")
}

// TestControlPlaneConfigPlanOnHostFails: the verification fails when
// kubeadm-config does not carry the configuration (nothing to render), and
// the phase fails without touching the manifests while the kubelet is
// stopped (kubeadm waits for the static pods to restart).
func TestControlPlaneConfigPlanOnHostFails(t *testing.T) {
	t.Run("kubeadm-config without the change", func(t *testing.T) {
		h, _ := cpHost(t, "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n")
		r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
		require.NoError(t, err)
		out, err := r.Run(t.Context(), cpConfigPlan(t, h.Node(), wantCPConfig...))
		require.Error(t, err)
		require.Contains(t, out.Steps[1].Output, "kube-apiserver.yaml has no argument --audit-log-maxage=30")
	})
	t.Run("kubelet stopped", func(t *testing.T) {
		h, _ := cpHost(t, clusterConfigurationV1beta4)
		before, _ := h.File("/etc/kubernetes/manifests/kube-apiserver.yaml")
		res, err := h.Run(t.Context(), nodeexec.Command{Argv: []string{"systemctl", "stop", "kubelet"}})
		require.NoError(t, err)
		require.Zero(t, res.ExitCode)
		r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
		require.NoError(t, err)
		out, err := r.Run(t.Context(), cpConfigPlan(t, h.Node(), wantCPConfig...))
		require.Error(t, err)
		require.Contains(t, out.Steps[0].Output, "timed out waiting for the condition")
		after, _ := h.File("/etc/kubernetes/manifests/kube-apiserver.yaml")
		require.Equal(t, before, after)
	})
	t.Run("a corrupted manifest is caught", func(t *testing.T) {
		h, _ := cpHost(t, clusterConfigurationV1beta4)
		r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
		require.NoError(t, err)
		p := cpConfigPlan(t, h.Node(), wantCPConfig...)
		_, err = r.Run(t.Context(), p)
		require.NoError(t, err)
		h.WriteFile("/etc/kubernetes/manifests/etcd.yaml", "image: registry.k8s.io/etcd:3.5.15-0\n")
		verify := cpConfigPlan(t, h.Node(), wantCPConfig...)
		verify.Name, verify.Steps = "verify-again", verify.Steps[1:]
		out, err := r.Run(t.Context(), verify)
		require.Error(t, err)
		require.Contains(t, out.Steps[0].Output, "etcd.yaml has no argument --quota-backend-bytes=8589934592")
	})
}

// TestKubeadmUpgradeRendersClusterConfiguration: `kubeadm upgrade apply`
// renders the manifests at the new version with kubeadm-config's extra
// arguments and etcd tag, so a version plan followed by the configuration
// verification passes.
func TestKubeadmUpgradeRendersClusterConfiguration(t *testing.T) {
	h, _ := cpHost(t, clusterConfigurationV1beta4)
	h.Stage(Staging{Kubernetes: "v1.31.1", Containerd: "2.0.5", CNI: "v1.7.1"})
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: h.Node(), Role: kubeadm.RoleFirstControlPlane, FromVersion: "v1.30.4", ToVersion: "v1.31.1"})
	require.NoError(t, err)
	plan.Steps = append(plan.Steps, cpConfigPlan(t, h.Node(), wantCPConfig...).Steps[1])
	r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	out, err := r.Run(context.Background(), plan)
	require.NoError(t, err, "%+v", out)
	require.Equal(t, "registry.k8s.io/kube-apiserver:v1.31.1", h.StaticPodImage("kube-apiserver"))
	require.Contains(t, h.StaticPodCommand("kube-apiserver"), "--audit-log-maxage=30")
	require.Equal(t, "3.5.16-0", h.Version(ComponentEtcd))
}

// TestControlPlaneConfigPlanCompletesInPods: in both pod layouts the plan
// completes under a simulated kubelet.
func TestControlPlaneConfigPlanCompletesInPods(t *testing.T) {
	for _, layout := range podLayouts {
		t.Run(layout.name, func(t *testing.T) {
			h, _ := cpHost(t, clusterConfigurationV1beta4)
			pr := newPodRunner(t, h, buildPod(t, cpConfigPlan(t, h.Node(), wantCPConfig...), layout.opts), t.TempDir())
			res, err := pr.Run(t.Context())
			require.NoError(t, err)
			require.Equal(t, PodPhaseSucceeded, res.Phase, "%+v", res)
			require.Contains(t, h.StaticPodCommand("kube-apiserver"), "--audit-log-maxage=30")
		})
	}
}

func TestLearnsEveryControlPlaneConfigScript(t *testing.T) {
	kinds := map[cpConfigKind]bool{}
	for _, k := range knownCPConfigScripts() {
		kinds[k] = true
	}
	require.Len(t, kinds, int(scriptVerifyManifests), "every script kind was found in the library's plan")
}
