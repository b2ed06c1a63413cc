package capi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/desiredstate"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// kcpCanUpdateMachine builds the CanUpdateMachine request
// KubeadmControlPlane sends for a joined control plane machine whose
// KubeadmConfig it created at from (with the KubeadmControlPlane's
// kubeadmConfigSpec curSpec) when the KubeadmControlPlane is now at to
// (with desSpec): Cluster API's own ComputeDesiredKubeadmConfig (which
// defaults the feature gates by version) for both, and its own
// PrepareKubeadmConfigsForDiff, as its createRequest does.
func kcpCanUpdateMachine(t *testing.T, from, to string, curSpec, desSpec bootstrapv1.KubeadmConfigSpec) *runtimehooksv1.CanUpdateMachineRequest {
	t.Helper()
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"}}
	kcpAt := func(v string, spec bootstrapv1.KubeadmConfigSpec) *controlplanev1.KubeadmControlPlane {
		return &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Name: "demo-cp", Namespace: "default"},
			Spec: controlplanev1.KubeadmControlPlaneSpec{Version: v, KubeadmConfigSpec: *spec.DeepCopy()}}
	}
	curCfg, err := desiredstate.ComputeDesiredKubeadmConfig(kcpAt(from, curSpec), cluster, true, "demo-cp-1", nil)
	require.NoError(t, err)
	desCfg, err := desiredstate.ComputeDesiredKubeadmConfig(kcpAt(to, desSpec), cluster, true, "demo-cp-1", curCfg)
	require.NoError(t, err)
	desCfg, curCfg = kcppkg.PrepareKubeadmConfigsForDiff(desCfg, curCfg, true)
	machine := func(v string) clusterv1.Machine {
		return clusterv1.Machine{TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
			ObjectMeta: metav1.ObjectMeta{Name: "demo-cp-1", Namespace: "default"},
			Spec:       clusterv1.MachineSpec{ClusterName: "demo", Version: v}}
	}
	cfgRaw := func(c *bootstrapv1.KubeadmConfig) runtime.RawExtension {
		c.TypeMeta = metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"}
		c.OwnerReferences, c.Labels, c.Annotations, c.UID = nil, nil, nil, ""
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return runtime.RawExtension{Raw: b}
	}
	infra := runtime.RawExtension{Raw: []byte(`{"apiVersion":"infrastructure.cluster.x-k8s.io/v1beta2","kind":"TestMachine","metadata":{"name":"demo-cp-1"},"spec":{"image":"test-image"}}`)}
	return &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine(from), BootstrapConfig: cfgRaw(curCfg), InfrastructureMachine: infra},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine(to), BootstrapConfig: cfgRaw(desCfg), InfrastructureMachine: infra},
	}
}

// TestKubeadmControlPlaneVersionsAcrossTheKubeletLocalModeGate: Cluster
// API v1.14's KubeadmControlPlane defaults
// featureGates.ControlPlaneKubeletLocalMode: true on its KubeadmConfigs
// for 1.31 <= version < 1.36 (kubeadm: alpha in v1.31, GA and locked on
// in v1.35, removed in v1.36). A v1.35 -> v1.36 update therefore removes
// the gate along with the version, and the extension accepts it in place
// with the kubeadm updater, whose `kubeadm upgrade` keeps the kubelet on
// the local API server; Cluster API, applying the patches, finds nothing
// left to roll. Adding the gate (v1.30 -> v1.31) switches a running
// kubelet to another API server, which nothing here applies: declined. So
// is any gate change that is not Cluster API's own at the version change.
func TestKubeadmControlPlaneVersionsAcrossTheKubeletLocalModeGate(t *testing.T) {
	kubeadmOnly := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	controlPlaneConfig := must(strategy.ForPaths("control-plane-config", strategy.ControlPlaneConfigPaths()...))
	withGates := func(gates map[string]bool) bootstrapv1.KubeadmConfigSpec {
		return bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{FeatureGates: gates, CertificatesDir: "/etc/kubernetes/pki"}}
	}
	base := withGates(nil)
	for _, tc := range []struct {
		name             string
		from, to         string
		cur, des         bootstrapv1.KubeadmConfigSpec
		updaters         []strategy.Updater
		accept           bool
		gatePatched      bool   // the bootstrap patch removes the gate
		declinedCategory string // a declined field's category, when declined
		bare             bool   // nothing else in ClusterConfiguration
	}{
		{name: "v1.35 -> v1.36: the gate goes with the version", from: "v1.35.4", to: "v1.36.3", accept: true, gatePatched: true},
		{name: "v1.35 -> v1.36 with nothing else in ClusterConfiguration", from: "v1.35.4", to: "v1.36.3", bare: true, accept: true, gatePatched: true},
		{name: "v1.35 -> v1.36 with another gate kept", from: "v1.35.4", to: "v1.36.3",
			cur: withGates(map[string]bool{"NodeLocalCRISocket": true}), des: withGates(map[string]bool{"NodeLocalCRISocket": true}), accept: true, gatePatched: true},
		{name: "v1.35.0-rc.1 -> v1.36.0-rc.1: pre-releases count as their release", from: "v1.35.0-rc.1", to: "v1.36.0-rc.1", accept: true, gatePatched: true},
		{name: "v1.34 -> v1.35: the gate on both sides", from: "v1.34.3", to: "v1.35.4", accept: true},
		{name: "v1.36 -> v1.37: no gate on either side", from: "v1.36.3", to: "v1.37.2", accept: true},
		{name: "v1.30 -> v1.31: the gate added, no updater switches the kubelet", from: "v1.30.4", to: "v1.31.1",
			declinedCategory: string(diff.CategoryControlPlaneConfig)},
		{name: "v1.35 at the same version: the gate set false by hand", from: "v1.35.4", to: "v1.35.4",
			des: withGates(map[string]bool{"ControlPlaneKubeletLocalMode": false}), declinedCategory: string(diff.CategoryControlPlaneConfig)},
		{name: "v1.35 -> v1.36 where the version is not applied in place", from: "v1.35.4", to: "v1.36.3",
			updaters: []strategy.Updater{controlPlaneConfig}, declinedCategory: string(diff.CategoryKubernetesVersion)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.cur.ClusterConfiguration.IsDefined() && !tc.bare {
				tc.cur = base
			}
			if !tc.des.ClusterConfiguration.IsDefined() && !tc.bare {
				tc.des = base
			}
			updaters := tc.updaters
			if updaters == nil {
				updaters = []strategy.Updater{kubeadmOnly, controlPlaneConfig}
			}
			ext, err := capi.NewExtension(strategy.Updaters(updaters...), capi.ExtensionOptions{})
			require.NoError(t, err)
			req := kcpCanUpdateMachine(t, tc.from, tc.to, tc.cur, tc.des)
			a, err := ext.AnswerCanUpdateMachine(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, tc.accept, a.Accept, "%s; declined: %v", a.Message, a.Declined)
			resp := &runtimehooksv1.CanUpdateMachineResponse{}
			ext.CanUpdateMachine(context.Background(), req, resp)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			if !tc.accept {
				require.NotEmpty(t, a.Declined)
				require.Contains(t, a.Declined[0], "("+tc.declinedCategory+")", "%v", a.Declined)
				var rollOut *capi.RollOutError
				require.ErrorAs(t, capi.VerifyCanUpdateMachine(req, resp), &rollOut, "Cluster API replaces the machine")
				return
			}
			require.NoError(t, capi.VerifyCanUpdateMachine(req, resp), "Cluster API, applying the patches, finds nothing left to roll: %s", resp.Message)
			require.Equal(t, []string{"kubeadm"}, a.Decision.Updaters(), "the version's updater applies it all")
			if tc.gatePatched {
				require.True(t, resp.BootstrapConfigPatch.IsDefined())
				require.Contains(t, string(resp.BootstrapConfigPatch.Patch), `"op":"remove"`)
				require.Contains(t, string(resp.BootstrapConfigPatch.Patch), "/spec/clusterConfiguration")
			} else {
				require.False(t, resp.BootstrapConfigPatch.IsDefined(), "nothing of the KubeadmConfig changes: %s", resp.BootstrapConfigPatch.Patch)
			}
		})
	}
}

// TestClusterAPIDefaultsTheKubeletLocalModeGateByVersion pins the Cluster
// API behaviour the extension relies on, from Cluster API's own code: the
// gate is defaulted to true from v1.31 up to, not including, v1.36.
func TestClusterAPIDefaultsTheKubeletLocalModeGateByVersion(t *testing.T) {
	for v, want := range map[string]map[string]bool{
		"v1.30.4": nil,
		"v1.31.0": {"ControlPlaneKubeletLocalMode": true},
		"v1.35.4": {"ControlPlaneKubeletLocalMode": true},
		"v1.36.0": nil,
		"v1.37.2": nil,
	} {
		kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Name: "demo-cp", Namespace: "default"},
			Spec: controlplanev1.KubeadmControlPlaneSpec{Version: v}}
		cfg, err := desiredstate.ComputeDesiredKubeadmConfig(kcp, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, true, "demo-cp-1", nil)
		require.NoError(t, err)
		require.Equal(t, want, cfg.Spec.ClusterConfiguration.FeatureGates, v)
	}
}
