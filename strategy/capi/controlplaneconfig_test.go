package capi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// controlPlaneConfig is a joining control plane's KubeadmConfig whose
// ClusterConfiguration sets API server extra arguments and an etcd tag.
func controlPlaneKubeadmConfig(t *testing.T, etcdTag string, apiserverArgs ...string) runtime.RawExtension {
	t.Helper()
	cfg := &bootstrapv1.KubeadmConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		Spec: bootstrapv1.KubeadmConfigSpec{
			ClusterConfiguration: bootstrapv1.ClusterConfiguration{Etcd: bootstrapv1.Etcd{Local: bootstrapv1.LocalEtcd{ImageTag: etcdTag}}},
			JoinConfiguration:    bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}},
		},
	}
	for _, a := range apiserverArgs {
		n, v, _ := strings.Cut(a, "=")
		cfg.Spec.ClusterConfiguration.APIServer.ExtraArgs = append(cfg.Spec.ClusterConfiguration.APIServer.ExtraArgs, bootstrapv1.Arg{Name: n, Value: ptrTo(v)})
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	return runtime.RawExtension{Raw: b}
}

// setKubeadmConfig writes kube-system/kubeadm-config's ClusterConfiguration
// as KubeadmControlPlane does (kubeadm v1beta4: extraArgs as a list).
func setKubeadmConfig(t *testing.T, pc *podsCluster, clusterConfiguration string) {
	t.Helper()
	var cm corev1.ConfigMap
	require.NoError(t, pc.c.Get(t.Context(), types.NamespacedName{Namespace: "kube-system", Name: "kubeadm-config"}, &cm))
	cm.Data["ClusterConfiguration"] = clusterConfiguration
	require.NoError(t, pc.c.Update(t.Context(), &cm))
}

// TestUpdateMachineAppliesControlPlaneConfig: a control plane machine's
// ClusterConfiguration (API server, controller-manager and scheduler extra
// arguments, etcd's image and arguments) is applied in place by
// regenerating the static pod manifests from kubeadm-config, which
// KubeadmControlPlane writes first, and verified in the manifests and the
// mirror pods before done.
func TestUpdateMachineAppliesControlPlaneConfig(t *testing.T) {
	const cc = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.35.4\napiServer:\n  extraArgs:\n  - name: audit-log-maxage\n    value: \"30\"\netcd:\n  local:\n    imageTag: 3.5.15-0\n"

	t.Run("same version: waits for kubeadm-config, then regenerates and verifies the manifests", func(t *testing.T) {
		pc := newPodsCluster(t)
		req := updateReq("cp-0", "docker:////cp-0", "v1.35.4", true)
		req.Desired.BootstrapConfig = controlPlaneKubeadmConfig(t, "3.5.15-0", "audit-log-maxage=30")
		requireWaiting(t, pc.call(req), "kubeadm-config does not carry the desired control plane configuration yet (kube-apiserver extraArgs are [], desired [audit-log-maxage=30])")
		require.Empty(t, pc.pods(), "nothing runs before kubeadm-config has it: kubeadm would render the old configuration")

		setKubeadmConfig(t, pc, cc)
		requireWaiting(t, pc.call(req), "started")
		pod := pc.onlyPod()
		steps := stepNames(pod)
		require.Equal(t, []string{kubeadm.StepControlPlaneConfig, kubeadm.StepControlPlaneConfigVerify}, steps[:2])
		require.Equal(t, []string{kubeadm.StepKubeletArgs, kubeadm.StepKubeletArgsVerify}, steps[2:])
		rec := pc.record()
		require.NotEmpty(t, rec.ControlPlaneConfig)

		finishPod(t, t.Context(), pc.c, pod, "", 0)
		requireWaiting(t, pc.call(req), "upgrade steps done")
		requireDone(t, pc.call(req))
		require.Equal(t, rec.ControlPlaneConfig, pc.node().Annotations[capi.AnnotationControlPlaneConfig])
		requireDone(t, pc.call(req))
		require.Len(t, pc.pods(), 1, "the same configuration again: nothing new to run")
	})

	t.Run("a version change verifies the manifests kubeadm upgrade rendered", func(t *testing.T) {
		pc := newPodsCluster(t)
		setKubeadmConfig(t, pc, strings.Replace(cc, "v1.35.4", "v1.36.1", 1))
		req := updateReq("cp-0", "docker:////cp-0", "v1.36.1", true)
		req.Desired.BootstrapConfig = controlPlaneKubeadmConfig(t, "3.5.15-0", "audit-log-maxage=30")
		requireWaiting(t, pc.call(req), "started")
		steps := stepNames(pc.onlyPod())
		require.Contains(t, steps, kubeadm.StepKubeadmUpgrade)
		require.Contains(t, steps, kubeadm.StepControlPlaneConfigVerify)
		require.NotContains(t, steps, kubeadm.StepControlPlaneConfig, "kubeadm upgrade renders the manifests itself")
	})

	t.Run("a worker's ClusterConfiguration is not its own: nothing to apply", func(t *testing.T) {
		pc := newPodsCluster(t)
		req := updateReq("w-0", "docker:////cp-0", "v1.35.4", false)
		req.Desired.BootstrapConfig = controlPlaneKubeadmConfig(t, "3.5.15-0", "audit-log-maxage=30")
		requireWaiting(t, pc.call(req), "started")
		require.NotContains(t, stepNames(pc.onlyPod()), kubeadm.StepControlPlaneConfig)
	})
}

// TestExtensionAcceptsControlPlaneConfigItCanApply: with an updater over
// strategy.ControlPlaneConfigPaths an API server argument or etcd image
// change is accepted in place; the rest of ClusterConfiguration is not.
func TestExtensionAcceptsControlPlaneConfigItCanApply(t *testing.T) {
	cpc := must(strategy.ForPaths("control-plane-config", strategy.ControlPlaneConfigPaths()...))
	ext, err := capi.NewExtension(strategy.Updaters(cpc), capi.ExtensionOptions{})
	require.NoError(t, err)
	cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
	des.Spec.Version = cur.Spec.Version
	desCfg.Spec.ClusterConfiguration.Etcd.Local.ImageTag = "3.5.15-0"
	desCfg.Spec.ClusterConfiguration.APIServer.ExtraArgs = []bootstrapv1.Arg{{Name: "audit-log-maxage", Value: ptrTo("30")}}
	resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.True(t, resp.BootstrapConfigPatch.IsDefined(), "accepted: %s", resp.Message)
	requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)

	desCfg.Spec.ClusterConfiguration.APIServer.CertSANs = []string{"api.example"}
	resp = canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
	require.False(t, resp.BootstrapConfigPatch.IsDefined(), "certSANs need new certificates: declined: %s", resp.Message)
}
