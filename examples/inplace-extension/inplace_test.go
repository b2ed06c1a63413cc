package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"

	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestAcceptsWhatUpdateMachineApplies: with UpdateMachine served here the
// extension accepts a kubelet extra-argument change, a control plane
// argument change and a file change in place (UpdateMachine applies them);
// with
// -no-update-machine only the -in-place categories are accepted.
func TestAcceptsWhatUpdateMachineApplies(t *testing.T) {
	mgmt := reachableMgmt(t)
	canUpdate := func(t *testing.T, args []string, edit func(*bootstrapv1.KubeadmConfig)) runtimehooksv1.CanUpdateMachineResponse {
		o, err := parseFlags(args, &strings.Builder{})
		require.NoError(t, err)
		metrics, err := capi.NewMetrics(prometheus.NewRegistry(), capi.MetricsOptions{})
		require.NoError(t, err)
		hs := handlers(t, o, deps{mgmt: mgmt, metrics: metrics})
		require.NoError(t, err)
		i := slices.IndexFunc(hs, func(h server.ExtensionHandler) bool { return h.Name == "upgradekit-can-update-machine" })
		require.GreaterOrEqual(t, i, 0)
		f, ok := hs[i].HandlerFunc.(func(context.Context, *runtimehooksv1.CanUpdateMachineRequest, *runtimehooksv1.CanUpdateMachineResponse))
		require.True(t, ok)
		raw := func(v any) runtime.RawExtension {
			b, err := json.Marshal(v)
			require.NoError(t, err)
			return runtime.RawExtension{Raw: b}
		}
		cfg := &bootstrapv1.KubeadmConfig{
			TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
			Spec:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}}},
		}
		des := cfg.DeepCopy()
		edit(des)
		m := clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: "default"}, Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.36.3"}}
		infra := map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine", "metadata": map[string]any{"name": "cp-1"}, "spec": map[string]any{}}
		var resp runtimehooksv1.CanUpdateMachineResponse
		f(context.Background(), &runtimehooksv1.CanUpdateMachineRequest{
			Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: m, BootstrapConfig: raw(cfg), InfrastructureMachine: raw(infra)},
			Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: m, BootstrapConfig: raw(des), InfrastructureMachine: raw(infra)},
		}, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		return resp
	}
	v := "200"
	kubeletArgs := func(c *bootstrapv1.KubeadmConfig) {
		c.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: &v}}
	}
	apiserverArgs := func(c *bootstrapv1.KubeadmConfig) {
		c.Spec.ClusterConfiguration.APIServer.ExtraArgs = []bootstrapv1.Arg{{Name: "audit-log-maxage", Value: &v}}
	}
	file := func(c *bootstrapv1.KubeadmConfig) {
		c.Spec.Files = []bootstrapv1.File{{Path: "/etc/kubernetes/example/limits.conf", Content: "nofile=65536"}}
	}
	for _, edit := range []func(*bootstrapv1.KubeadmConfig){kubeletArgs, apiserverArgs, file} {
		resp := canUpdate(t, []string{"-upgrader-image", "registry.example/upgrader:v1.36.3@" + testDigest, "-allow-unverified-bundles"}, edit)
		require.True(t, resp.BootstrapConfigPatch.IsDefined(), "accepted: %s", resp.Message)
		resp = canUpdate(t, []string{"-no-update-machine"}, edit)
		require.False(t, resp.BootstrapConfigPatch.IsDefined(), "declined without UpdateMachine here: %s", resp.Message)
	}
}
