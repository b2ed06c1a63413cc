package capi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// The in-place contract on the CanUpdate* side: accept only what an
// executor applies, decline what cannot be applied before Cluster API
// commits to it, and patch everything accepted, ignored changes included,
// so that Cluster API's comparison after the patches finds nothing to roll.

// contractPair is machinePair with only the version changing (v1.35.4 ->
// v1.36.1): the base every case edits.
func contractPair() (cur, des *clusterv1.Machine, curCfg, desCfg *bootstrapv1.KubeadmConfig, curInfra, desInfra map[string]any) {
	cur, des, curCfg, _, curInfra, desInfra = machinePair()
	desCfg = curCfg.DeepCopy() // machinePair's etcd image change left out
	return
}

func canUpdateMachine(t *testing.T, ext *capi.Extension, settings map[string]string, cur, des *clusterv1.Machine, curCfg, desCfg *bootstrapv1.KubeadmConfig, curInfra, desInfra map[string]any) *runtimehooksv1.CanUpdateMachineResponse {
	t.Helper()
	req := &runtimehooksv1.CanUpdateMachineRequest{
		CommonRequest: runtimehooksv1.CommonRequest{Settings: settings},
		Current:       runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
		Desired:       runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)},
	}
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	ext.CanUpdateMachine(context.Background(), req, resp)
	return resp
}

// requireNothingLeftToRoll applies the answer's patches to the current
// objects, spec only as Cluster API does, and requires the result to
// equal desired.
func requireNothingLeftToRoll(t *testing.T, resp *runtimehooksv1.CanUpdateMachineResponse, cur, des *clusterv1.Machine, curCfg, desCfg *bootstrapv1.KubeadmConfig, curInfra, desInfra map[string]any) {
	t.Helper()
	for _, o := range []struct {
		name     string
		cur, des any
		patch    runtimehooksv1.Patch
	}{
		{"machine", cur, des, resp.MachinePatch},
		{"bootstrap config", curCfg, desCfg, resp.BootstrapConfigPatch},
		{"infrastructure machine", curInfra, desInfra, resp.InfrastructureMachinePatch},
	} {
		var got, want map[string]any
		require.NoError(t, json.Unmarshal(applyLikeCAPI(t, o.cur, o.patch), &got))
		wantRaw, err := json.Marshal(o.des)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(wantRaw, &want))
		require.Empty(t, cmp.Diff(want["spec"], got["spec"]), "%s: the patched spec differs from desired, so Cluster API would roll the machine", o.name)
	}
}

func TestExtensionDeclinesWhatNoExecutorApplies(t *testing.T) {
	kubeadm := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{})
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		edit  func(des *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig)
		field string
	}{
		{"kubelet max-pods", func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
			cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: ptrTo("200")}}
		}, "bootstrap.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs"},
		{"etcd image at the same version", func(des *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
			des.Spec.Version = "v1.35.4"
			cfg.Spec.ClusterConfiguration.Etcd.Local.ImageTag = "3.5.15-0"
		}, "bootstrap.spec.clusterConfiguration.etcd.local.imageTag"},
		{"API server arguments", func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
			cfg.Spec.ClusterConfiguration.APIServer.ExtraArgs = []bootstrapv1.Arg{{Name: "audit-log-maxage", Value: ptrTo("30")}}
		}, "bootstrap.spec.clusterConfiguration.apiServer.extraArgs"},
		{"a file", func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
			cfg.Spec.Files[0].Content = "v2"
		}, "bootstrap.spec.files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
			tc.edit(des, desCfg)
			resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			require.Contains(t, resp.Message, "cannot update in place")
			require.Contains(t, resp.Message, tc.field)
			require.False(t, resp.MachinePatch.IsDefined() || resp.BootstrapConfigPatch.IsDefined() || resp.InfrastructureMachinePatch.IsDefined(),
				"a decline carries no patch")
		})
	}
}

func TestExtensionChecksFeasibilityBeforeAccepting(t *testing.T) {
	kubeadm := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	images := capi.ImagesByVersion{"v1.36.1": "registry.example/upgrader:v1.36.1"}
	for _, tc := range []struct {
		name     string
		from, to string
		opts     []extOpt
		accept   bool
		message  string
	}{
		{"one minor up", "v1.35.4", "v1.36.1", nil, true, "in place by kubeadm"},
		{"a patch release", "v1.36.0", "v1.36.1", nil, true, "in place by kubeadm"},
		{"a skipped minor", "v1.35.4", "v1.37.0", nil, false, "skips a minor version"},
		{"a downgrade", "v1.36.1", "v1.35.4", nil, false, "downgrade refused"},
		{"a major change", "v1.36.1", "v2.0.0", nil, false, "major version change"},
		{"not canonical", "v1.35.4", "1.31.1", nil, false, "invalid Kubernetes version"},
		{"an image for the version", "v1.35.4", "v1.36.1", []extOpt{withUpgraderImages(images)}, true, "in place by kubeadm"},
		{"a check declines", "v1.35.4", "v1.36.1", []extOpt{withChecks(capi.CheckFunc(func(context.Context, capi.CheckRequest) error {
			return errors.Join(capi.ErrInfeasible, errors.New("control plane is at v1.30"))
		}))}, false, "control plane is at v1.30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ext, err := capi.NewExtension(strategy.Updaters(kubeadm), extensionOpts(tc.opts...))
			require.NoError(t, err)
			cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
			cur.Spec.Version, des.Spec.Version = tc.from, tc.to
			resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			require.Contains(t, resp.Message, tc.message)
			require.Equal(t, tc.accept, resp.MachinePatch.IsDefined(), resp.Message)
			if tc.accept {
				requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)
			}
		})
	}

	t.Run("a check that cannot tell answers Failure", func(t *testing.T) {
		ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{Checks: []capi.Check{capi.CheckFunc(func(context.Context, capi.CheckRequest) error {
			return errors.New("management cluster unreachable")
		})}})
		require.NoError(t, err)
		cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
		resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
		require.Contains(t, resp.Message, "management cluster unreachable")
		require.False(t, resp.MachinePatch.IsDefined())
	})

	t.Run("bad options", func(t *testing.T) {
		for _, opt := range []extOpt{
			withUpgraderImages(capi.ImagesByVersion{}),
			withUpgraderImages(capi.ImagesByVersion{"1.31.1": "img"}),
			withUpgraderImages(capi.ImagesByVersion{"v1.36.1": " "}),
			withChecks(nil),
		} {
			_, err := capi.NewExtension(strategy.Updaters(kubeadm), extensionOpts(opt))
			require.ErrorIs(t, err, capi.ErrInvalidOption)
		}
	})

	t.Run("MachineSet: a skipped minor is declined", func(t *testing.T) {
		ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{})
		require.NoError(t, err)
		cur, _, curCfg, desCfg, curInfra, desInfra := contractPair()
		ms := func(v string) clusterv1.MachineSet {
			return clusterv1.MachineSet{ObjectMeta: cur.ObjectMeta, Spec: clusterv1.MachineSetSpec{ClusterName: "demo",
				Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: v, Bootstrap: cur.Spec.Bootstrap, InfrastructureRef: cur.Spec.InfrastructureRef}}}}
		}
		tmpl := func(spec any) map[string]any {
			return map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachineTemplate",
				"metadata": map[string]any{"name": "md-0"}, "spec": map[string]any{"template": map[string]any{"spec": spec}}}
		}
		cfgTmpl := func(c *bootstrapv1.KubeadmConfig) *bootstrapv1.KubeadmConfigTemplate {
			return &bootstrapv1.KubeadmConfigTemplate{TypeMeta: c.TypeMeta, Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{Spec: c.Spec}}}
		}
		curMS, desMS := ms("v1.35.4"), ms("v1.37.0")
		curMS.TypeMeta.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("MachineSet"))
		desMS.TypeMeta = curMS.TypeMeta
		curTmpl, desTmpl := cfgTmpl(curCfg), cfgTmpl(desCfg)
		curTmpl.Kind, desTmpl.Kind = "KubeadmConfigTemplate", "KubeadmConfigTemplate"
		req := &runtimehooksv1.CanUpdateMachineSetRequest{
			Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: curMS, BootstrapConfigTemplate: raw(t, curTmpl), InfrastructureMachineTemplate: raw(t, tmpl(curInfra["spec"]))},
			Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: desMS, BootstrapConfigTemplate: raw(t, desTmpl), InfrastructureMachineTemplate: raw(t, tmpl(desInfra["spec"]))},
		}
		resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
		ext.CanUpdateMachineSet(context.Background(), req, resp)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Contains(t, resp.Message, "skips a minor version")
		require.False(t, resp.MachineSetPatch.IsDefined())
	})
}

func TestExtensionPatchesIgnoredChanges(t *testing.T) {
	kubeadm := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{})
	require.NoError(t, err)

	t.Run("the ignore setting", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
		desInfra["spec"].(map[string]any)["customImage"] = "kindest/node:v1.36.1"
		resp := canUpdateMachine(t, ext, map[string]string{capi.SettingIgnore: "infrastructure.spec.customImage"}, cur, des, curCfg, desCfg, curInfra, desInfra)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Contains(t, resp.Message, "1 ignored change(s) accepted without being applied: infrastructure.spec.customImage")
		require.True(t, resp.InfrastructureMachinePatch.IsDefined(), "the ignored change is recorded in the patch")
		requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)
	})

	t.Run("only ignored changes", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
		des.Spec.Version = cur.Spec.Version
		desInfra["spec"].(map[string]any)["customImage"] = "kindest/node:v1.36.1"
		resp := canUpdateMachine(t, ext, map[string]string{capi.SettingIgnore: "infrastructure.spec.customImage"}, cur, des, curCfg, desCfg, curInfra, desInfra)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.True(t, resp.InfrastructureMachinePatch.IsDefined(), resp.Message)
		requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)
	})

	t.Run("a policy's ActionIgnore", func(t *testing.T) {
		policy, err := strategy.NewPolicy([]strategy.Rule{
			{Category: diff.CategoryKubernetesVersion, Action: strategy.ActionInPlace},
			{Category: diff.CategoryFiles, Action: strategy.ActionIgnore},
		}, strategy.ActionReplace, kubeadm)
		require.NoError(t, err)
		ext, err := capi.NewExtension(policy, capi.ExtensionOptions{})
		require.NoError(t, err)
		cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
		desCfg.Spec.Files[0].Content = "v2"
		resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.True(t, resp.BootstrapConfigPatch.IsDefined(), resp.Message)
		requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)
	})

	t.Run("disabled still declines ignored changes", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
		resp := canUpdateMachine(t, ext, map[string]string{capi.SettingDisabled: "true", capi.SettingIgnore: "machine.spec.version"}, cur, des, curCfg, desCfg, curInfra, desInfra)
		require.Contains(t, resp.Message, "disabled")
		require.False(t, resp.MachinePatch.IsDefined())
	})
}

func ptrTo[T any](v T) *T { return &v }

// TestExtensionAcceptsFilesItCanWrite: with the files updater, a changed
// inline file is accepted (and the patch leaves CAPI nothing to roll); a
// changed file MachineUpdater cannot write is declined naming it, while
// such a file left unchanged does not stand in the way.
func TestExtensionAcceptsFilesItCanWrite(t *testing.T) {
	files := must(strategy.ForPaths("files", strategy.FilesPaths()...))
	ext, err := capi.NewExtension(strategy.Updaters(files), capi.ExtensionOptions{})
	require.NoError(t, err)
	motd := bootstrapv1.File{Path: "/etc/motd", Content: "v1"}
	secret := bootstrapv1.File{Path: "/etc/kubernetes/example/token", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "token", Key: "value"}}}
	for _, tc := range []struct {
		name    string
		cur     []bootstrapv1.File
		des     []bootstrapv1.File
		accept  bool
		message string
	}{
		{"inline content changed", []bootstrapv1.File{{Path: "/etc/kubernetes/motd", Content: "v1"}}, []bootstrapv1.File{{Path: "/etc/kubernetes/motd", Content: "v2"}}, true, "in place"},
		{"a file added beside an unchanged Secret file", []bootstrapv1.File{secret}, []bootstrapv1.File{secret, {Path: "/etc/kubernetes/motd", Content: "v2"}}, true, "in place"},
		{"a file added beside an unchanged one outside the allowed directories", []bootstrapv1.File{motd}, []bootstrapv1.File{motd, {Path: "/etc/sysctl.d/99-k8s.conf", Content: "x"}}, true, "in place"},
		{"a file outside the allowed directories changed", []bootstrapv1.File{motd}, []bootstrapv1.File{{Path: "/etc/motd", Content: "v2"}}, false, "not under an allowed directory"},
		{"sudoers", nil, []bootstrapv1.File{{Path: "/etc/sudoers.d/ops", Content: "ops ALL=(ALL) NOPASSWD:ALL"}}, false, "bootstrap.spec.files[0].path"},
		{"a kubelet drop-in", nil, []bootstrapv1.File{{Path: "/etc/systemd/system/kubelet.service.d/20-x.conf", Content: "x"}}, false, "not under an allowed directory"},
		{"the kubeadm the plan runs", nil, []bootstrapv1.File{{Path: "/usr/bin/kubeadm", Content: "x", Permissions: "0755"}}, false, "not under an allowed directory"},
		{"setuid", nil, []bootstrapv1.File{{Path: "/etc/kubernetes/tool", Content: "x", Permissions: "4755"}}, false, "bootstrap.spec.files[0].permissions"},
		{"a Secret file added", nil, []bootstrapv1.File{secret}, false, "its content comes from Secret token"},
		{"append", nil, []bootstrapv1.File{{Path: "/etc/kubernetes/motd", Content: "x", Append: new(true)}}, false, "append"},
		{"a kubeadm key", nil, []bootstrapv1.File{{Path: "/etc/kubernetes/pki/ca.key", Content: "x"}}, false, "/etc/kubernetes/pki"},
		{"a template", nil, []bootstrapv1.File{{Path: "/etc/kubernetes/motd", Content: "{{ .controlPlane.version }}", ContentFormat: bootstrapv1.FileContentFormatTemplate}}, false, "Template"},
		{"bad base64", nil, []bootstrapv1.File{{Path: "/etc/kubernetes/motd", Content: "!!", Encoding: bootstrapv1.Base64}}, false, "cannot be written in place"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
			des.Spec.Version = cur.Spec.Version
			curCfg.Spec.Files, desCfg.Spec.Files = tc.cur, tc.des
			resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			require.Contains(t, resp.Message, tc.message)
			require.Equal(t, tc.accept, resp.BootstrapConfigPatch.IsDefined(), resp.Message)
			if tc.accept {
				requireNothingLeftToRoll(t, resp, cur, des, curCfg, desCfg, curInfra, desInfra)
			}
		})
	}
}
