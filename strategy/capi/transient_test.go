package capi_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestExtensionFailsForAVersionItIsNotConfiguredFor: a version change to a
// version without an upgrader image is a Failure (which Cluster API does
// not remember, and asks again about), not a decline (which it remembers
// for a MachineSet for 24 hours, replacing the whole MachineDeployment):
// once the image is configured, the same request is accepted. The
// disabled setting stays a decline: it is the switch to have Cluster API
// replace machines.
func TestExtensionFailsForAVersionItIsNotConfiguredFor(t *testing.T) {
	kubeadm := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
	cur.Spec.Version, des.Spec.Version = "v1.36.1", "v1.37.0"

	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{Images: capi.ImagesByVersion{"v1.36.1": "registry.example/upgrader:v1.36.1"}})
	require.NoError(t, err)
	resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
	require.Contains(t, resp.Message, "no upgrader image for v1.37.0 (have: v1.36.1)")
	require.False(t, resp.MachinePatch.IsDefined())
	_, err = ext.AnswerCanUpdateMachine(t.Context(), &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)}})
	require.ErrorIs(t, err, capi.ErrVersionNotConfigured)
	require.NotErrorIs(t, err, capi.ErrInfeasible)

	// The operator adds the image: Cluster API's next question is accepted.
	ext, err = capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{Images: capi.ImagesByVersion{
		"v1.36.1": "registry.example/upgrader:v1.36.1", "v1.37.0": "registry.example/upgrader:v1.37.0"}})
	require.NoError(t, err)
	resp = canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.True(t, resp.MachinePatch.IsDefined(), resp.Message)
	requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)

	resp = canUpdateMachine(t, ext, map[string]string{capi.SettingDisabled: "true"}, cur, des, curCfg, desCfg, curInfra, desInfra)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.False(t, resp.MachinePatch.IsDefined(), "disabled: a decline, so Cluster API replaces: %s", resp.Message)
}
