package capi_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

func TestExtensionSelfCheckDeclinesWhatCAPIWouldStillSee(t *testing.T) {
	kubeadm := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	for _, tc := range []struct {
		name    string
		opts    []extOpt
		edit    func(desInfra map[string]any)
		decline string
	}{
		{"nothing hidden: accepted", nil, func(map[string]any) {}, ""},
		{"a diff option hides a change CAPI compares",
			[]extOpt{withDiffOptions(diff.Ignore("infrastructure.spec.customImage"))},
			func(des map[string]any) { des["spec"].(map[string]any)["customImage"] = "kindest/node:v1.36.1" },
			"infrastructure.spec.customImage"},
		{"an empty value hidden too",
			[]extOpt{withDiffOptions(diff.Ignore("infrastructure.spec.extra"))},
			func(des map[string]any) { des["spec"].(map[string]any)["extra"] = "" },
			"infrastructure.spec.extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ext, err := capi.NewExtension(strategy.Updaters(kubeadm), extensionOpts(tc.opts...))
			require.NoError(t, err)
			cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
			tc.edit(desInfra)
			resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			if tc.decline == "" {
				require.True(t, resp.MachinePatch.IsDefined(), resp.Message)
				requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)
				return
			}
			require.Contains(t, resp.Message, "cannot update in place: "+capi.SelfCheckMessageForTest)
			require.Contains(t, resp.Message, tc.decline)
			require.False(t, resp.MachinePatch.IsDefined() || resp.BootstrapConfigPatch.IsDefined() || resp.InfrastructureMachinePatch.IsDefined(),
				"a decline carries no patch")
		})
	}
}
