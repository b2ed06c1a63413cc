package capi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// workerConfig is a worker's KubeadmConfig with the given kubelet extra
// arguments (name=value).
func workerConfig(t *testing.T, args ...string) runtime.RawExtension {
	t.Helper()
	cfg := &bootstrapv1.KubeadmConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		Spec:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "w"}}},
	}
	for _, a := range args {
		n, v, _ := strings.Cut(a, "=")
		cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = append(cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs, bootstrapv1.Arg{Name: n, Value: ptrTo(v)})
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	return runtime.RawExtension{Raw: b}
}

func stepNames(pod *corev1.Pod) []string {
	return strings.Split(pod.Annotations[nodepod.AnnotationSteps], ",")
}

// TestUpdateMachineAppliesKubeletArgs: the kubelet's extra arguments of
// the desired KubeadmConfig are applied with the update's plan and
// verified on the node; "done" for them needs that plan's recorded
// success, which stays on the Node (capi.AnnotationKubeletArgs) so that
// the same arguments are not applied again.
func TestUpdateMachineAppliesKubeletArgs(t *testing.T) {
	t.Run("same version: a plan of the kubelet-args steps only", func(t *testing.T) {
		pc := newPodsCluster(t)
		req := updateReq("w-0", "docker:////cp-0", "v1.35.4", false)
		req.Desired.BootstrapConfig = workerConfig(t, "max-pods=200")
		requireWaiting(t, pc.call(req), "started")
		pod := pc.onlyPod()
		require.Equal(t, []string{kubeadm.StepKubeletArgs, kubeadm.StepKubeletArgsVerify}, stepNames(pod))
		rec := pc.record()
		require.NotEmpty(t, rec.KubeletArgs)

		finishPod(t, t.Context(), pc.c, pod, "", 0)
		requireWaiting(t, pc.call(req), "upgrade steps done")
		requireDone(t, pc.call(req))
		require.Equal(t, rec.KubeletArgs, pc.node().Annotations[capi.AnnotationKubeletArgs], "applied and verified: kept on the Node")
		require.Nil(t, pc.record())

		requireDone(t, pc.call(req))
		require.Len(t, pc.pods(), 1, "the same arguments again: nothing new to run")
		require.Equal(t, pod.Name, pc.onlyPod().Name)

		other := req.DeepCopy()
		other.Desired.BootstrapConfig = workerConfig(t, "max-pods=250")
		requireWaiting(t, pc.call(other), "deleted the finished upgrader pod")
		requireWaiting(t, pc.call(other), "started")
		require.NotEqual(t, rec.KubeletArgs, pc.record().KubeletArgs, "other arguments: another update")
		require.NotEqual(t, pod.Name, pc.onlyPod().Name)
	})

	t.Run("a version change carries the kubelet-args steps after the kubelet's", func(t *testing.T) {
		pc := newPodsCluster(t)
		req := updateReq("w-0", "docker:////cp-0", "v1.36.1", false)
		req.Desired.BootstrapConfig = workerConfig(t, "max-pods=200")
		requireWaiting(t, pc.call(req), "started worker upgrade")
		steps := stepNames(pc.onlyPod())
		require.Equal(t, []string{kubeadm.StepKubeletArgs, kubeadm.StepKubeletArgsVerify}, steps[len(steps)-2:])
		require.Contains(t, steps, kubeadm.StepKubeadmUpgrade)
	})

	t.Run("a failed kubelet-args step is a Failure, and done is never answered", func(t *testing.T) {
		pc := newPodsCluster(t)
		req := updateReq("w-0", "docker:////cp-0", "v1.35.4", false)
		req.Desired.BootstrapConfig = workerConfig(t, "max-pods=200")
		requireWaiting(t, pc.call(req), "started")
		finishPod(t, t.Context(), pc.c, pc.onlyPod(), kubeadm.StepKubeletArgsVerify, 1)
		resp := pc.call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureStepFailed)
		require.Empty(t, pc.node().Annotations[capi.AnnotationKubeletArgs])
	})

	t.Run("arguments that cannot be written are refused before any disruption", func(t *testing.T) {
		pc := newPodsCluster(t)
		req := updateReq("w-0", "docker:////cp-0", "v1.35.4", false)
		req.Desired.BootstrapConfig = workerConfig(t, "node-labels=a=b c")
		resp := pc.call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailurePlanRejected)
		require.Contains(t, resp.Message, "node-labels")
		require.Empty(t, pc.pods())
	})

	t.Run("the first control plane's arguments are its init configuration's", func(t *testing.T) {
		pc := newPodsCluster(t)
		cfg := &bootstrapv1.KubeadmConfig{
			TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
			Spec: bootstrapv1.KubeadmConfigSpec{InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
				KubeletExtraArgs: []bootstrapv1.Arg{{Name: "node-labels", Value: ptrTo("a=b c")}}}}},
		}
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		req := updateReq("w-0", "docker:////cp-0", "v1.35.4", false)
		req.Desired.BootstrapConfig = runtime.RawExtension{Raw: b}
		resp := pc.call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, "node-labels", "read from initConfiguration (no joinConfiguration)")
	})

	t.Run("no KubeadmConfig in the request: the kubelet's arguments are left alone", func(t *testing.T) {
		pc := newPodsCluster(t)
		requireDone(t, pc.call(updateReq("w-0", "docker:////cp-0", "v1.35.4", false)))
		require.Empty(t, pc.pods())
	})
}

// TestExtensionAcceptsKubeletArgsItCanApply: with an updater over
// strategy.KubeletExtraArgsPaths the extension accepts a kubelet
// extra-argument change in place, patched so that Cluster API finds nothing
// to roll; an argument MachineUpdater cannot write is declined
// (capi.KubeletArgsCheck, always on).
func TestExtensionAcceptsKubeletArgsItCanApply(t *testing.T) {
	version := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	args := must(strategy.ForPaths("kubelet-args", strategy.KubeletExtraArgsPaths()...))
	ext, err := capi.NewExtension(strategy.Updaters(version, args), capi.ExtensionOptions{})
	require.NoError(t, err)

	cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
	desCfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: ptrTo("200")}}
	resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.True(t, resp.BootstrapConfigPatch.IsDefined(), "accepted: %s", resp.Message)
	requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)

	desCfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "node-labels", Value: ptrTo("a=b c")}}
	resp = canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.False(t, resp.MachinePatch.IsDefined() || resp.BootstrapConfigPatch.IsDefined(), "declined: %s", resp.Message)
	require.Contains(t, resp.Message, "kubelet extra arguments cannot be applied in place")

	// The rest of nodeRegistration has no executor.
	taints := desCfg.DeepCopy()
	taints.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: ptrTo("200")}}
	taints.Spec.JoinConfiguration.NodeRegistration.Taints = &[]corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}}
	resp = canUpdateMachine(t, ext, nil, cur, des, curCfg, taints, curInfra, desInfra)
	require.False(t, resp.BootstrapConfigPatch.IsDefined(), "taints are not kubelet extra arguments: %s", resp.Message)

	// Kubelet arguments unchanged, but unwritable: every update would fail
	// at the node, so even a version change is declined.
	curCfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = desCfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs
	resp = canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
	require.False(t, resp.MachinePatch.IsDefined(), "declined: %s", resp.Message)
}
