package capi_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

type hookClient struct {
	t       *testing.T
	http    *http.Client
	base    string
	catalog *runtimecatalog.Catalog
}

func (c hookClient) call(hook runtimecatalog.Hook, name string, req, resp any) {
	c.t.Helper()
	gvh, err := c.catalog.GroupVersionHook(hook)
	require.NoError(c.t, err)
	body, err := json.Marshal(req)
	require.NoError(c.t, err)
	r, err := c.http.Post(c.base+runtimecatalog.GVHToPath(gvh, name), "application/json", bytes.NewReader(body))
	require.NoError(c.t, err)
	defer r.Body.Close()
	require.Equal(c.t, http.StatusOK, r.StatusCode)
	require.NoError(c.t, json.NewDecoder(r.Body).Decode(resp))
}

// post sends body as is and decodes the response: for requests that
// json.Marshal would never produce.
func (c hookClient) post(hook runtimecatalog.Hook, name string, body []byte, resp any) {
	c.t.Helper()
	gvh, err := c.catalog.GroupVersionHook(hook)
	require.NoError(c.t, err)
	r, err := c.http.Post(c.base+runtimecatalog.GVHToPath(gvh, name), "application/json", bytes.NewReader(body))
	require.NoError(c.t, err)
	defer r.Body.Close()
	require.Equal(c.t, http.StatusOK, r.StatusCode)
	require.NoError(c.t, json.NewDecoder(r.Body).Decode(resp))
}

// startExtension serves the extension's handlers over HTTPS with CAPI's own
// runtime extension server and returns a client trusting its CA.
func startExtension(t *testing.T, ext *capi.Extension) hookClient {
	t.Helper()
	catalog := runtimecatalog.New()
	require.NoError(t, runtimehooksv1.AddToCatalog(catalog))
	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	srv, err := server.New(server.Options{Catalog: catalog, Host: "127.0.0.1", Port: port, CertDir: dir})
	require.NoError(t, err)
	for _, h := range ext.Handlers("upgradekit") {
		require.NoError(t, srv.AddExtensionHandler(h))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	require.Eventually(t, func() bool {
		r, err := client.Get(base + "/")
		if err != nil {
			return false
		}
		r.Body.Close()
		return true
	}, 30*time.Second, 50*time.Millisecond, "extension server did not come up")
	return hookClient{t: t, http: client, base: base, catalog: catalog}
}

func raw(t *testing.T, v any) runtime.RawExtension {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return runtime.RawExtension{Raw: b}
}

func machinePair() (cur, des *clusterv1.Machine, curCfg, desCfg *bootstrapv1.KubeadmConfig, curInfra, desInfra map[string]any) {
	cur = &clusterv1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: "default"},
		Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.35.4", ProviderID: "docker:////cp-1",
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: "cp-1"}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachine", Name: "cp-1"}},
	}
	des = cur.DeepCopy()
	des.Spec.Version = "v1.36.1"
	curCfg = &bootstrapv1.KubeadmConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		Spec: bootstrapv1.KubeadmConfigSpec{
			ClusterConfiguration: bootstrapv1.ClusterConfiguration{Etcd: bootstrapv1.Etcd{Local: bootstrapv1.LocalEtcd{ImageTag: "3.5.12-0"}}},
			JoinConfiguration:    bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}},
			Files:                []bootstrapv1.File{{Path: "/etc/motd", Content: "v1"}},
		},
	}
	desCfg = curCfg.DeepCopy()
	desCfg.Spec.ClusterConfiguration.Etcd.Local.ImageTag = "3.5.15-0"
	curInfra = map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
		"metadata": map[string]any{"name": "cp-1"}, "spec": map[string]any{"customImage": "kindest/node:v1.35.4", "providerID": "docker:////cp-1"}}
	desInfra = map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
		"metadata": map[string]any{"name": "cp-1"}, "spec": map[string]any{"customImage": "kindest/node:v1.35.4", "providerID": "docker:////cp-1"}}
	return
}

// applyLikeCAPI applies a patch to an object's JSON and copies back spec
// only, as CAPI does.
func applyLikeCAPI(t *testing.T, obj any, p runtimehooksv1.Patch) []byte {
	t.Helper()
	doc, err := json.Marshal(obj)
	require.NoError(t, err)
	if !p.IsDefined() {
		return doc
	}
	require.Equal(t, runtimehooksv1.JSONPatchType, p.PatchType)
	jp, err := jsonpatch.DecodePatch(p.Patch)
	require.NoError(t, err)
	out, err := jp.Apply(doc)
	require.NoError(t, err)
	var before, after map[string]any
	require.NoError(t, json.Unmarshal(doc, &before))
	require.NoError(t, json.Unmarshal(out, &after))
	before["spec"] = after["spec"]
	res, err := json.Marshal(before)
	require.NoError(t, err)
	return res
}

// TestExtensionOverHTTPS calls the extension, served by CAPI's runtime
// server over TLS with a self-signed CA, with CAPI's request types.
func TestExtensionOverHTTPS(t *testing.T) {
	k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	etcd := must(strategy.ForCategories("etcd", diff.CategoryEtcdVersion))
	ext, err := capi.NewExtension(strategy.Updaters(k8s, etcd), capi.ExtensionOptions{})
	require.NoError(t, err)
	c := startExtension(t, ext)
	hookTypeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: kind}
	}

	t.Run("accept: patches make CAPI's re-diff empty", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := machinePair()
		req := &runtimehooksv1.CanUpdateMachineRequest{
			TypeMeta: hookTypeMeta("CanUpdateMachineRequest"),
			Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
			Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)},
		}
		var resp runtimehooksv1.CanUpdateMachineResponse
		c.call(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.JSONEq(t, `[{"op":"replace","path":"/spec/version","value":"v1.36.1"}]`, string(resp.MachinePatch.Patch))
		require.True(t, resp.BootstrapConfigPatch.IsDefined())
		require.False(t, resp.InfrastructureMachinePatch.IsDefined(), "nothing to patch on the DockerMachine")

		patched := diff.State{
			Machine:        applyLikeCAPI(t, cur, resp.MachinePatch),
			Bootstrap:      applyLikeCAPI(t, curCfg, resp.BootstrapConfigPatch),
			Infrastructure: applyLikeCAPI(t, curInfra, resp.InfrastructureMachinePatch),
		}
		again, err := diff.Machines(patched, diff.State{Machine: des, Bootstrap: desCfg, Infrastructure: desInfra}, diff.InPlaceUpdate())
		require.NoError(t, err)
		require.True(t, again.Empty(), "CAPI would still see:\n%s", again)
	})

	t.Run("decline: no patches, the message names the field", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := machinePair()
		desInfra["spec"].(map[string]any)["customImage"] = "kindest/node:v1.36.1"
		desCfg.Spec.Files[0].Content = "v2"
		req := &runtimehooksv1.CanUpdateMachineRequest{
			TypeMeta: hookTypeMeta("CanUpdateMachineRequest"),
			Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
			Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)},
		}
		var resp runtimehooksv1.CanUpdateMachineResponse
		c.call(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status)
		require.False(t, resp.MachinePatch.IsDefined())
		require.False(t, resp.BootstrapConfigPatch.IsDefined())
		require.Contains(t, resp.Message, "infrastructure.spec.customImage (InfrastructureImage)")
		require.Contains(t, resp.Message, "bootstrap.spec.files[path=/etc/motd].content (Files)")
		require.NotContains(t, resp.Message, "v2", "file contents stay out of messages")
	})

	t.Run("machine set templates", func(t *testing.T) {
		ms := clusterv1.MachineSet{TypeMeta: metav1.TypeMeta{Kind: "MachineSet"}, ObjectMeta: metav1.ObjectMeta{Name: "md-0-abc", Namespace: "default"},
			Spec: clusterv1.MachineSetSpec{ClusterName: "demo", Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: "demo", Version: "v1.35.4",
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{Kind: "DockerMachineTemplate", Name: "md-0-1"}}}}}
		ms2 := ms.DeepCopy()
		ms2.Spec.Template.Spec.Version = "v1.36.1"
		ms2.Spec.Template.Spec.InfrastructureRef.Name = "md-0-2" // a new template name is not a reason to roll in place
		tmpl := map[string]any{"kind": "DockerMachineTemplate", "spec": map[string]any{"template": map[string]any{"spec": map[string]any{"customImage": "kindest/node:v1.35.4"}}}}
		req := &runtimehooksv1.CanUpdateMachineSetRequest{
			TypeMeta: hookTypeMeta("CanUpdateMachineSetRequest"),
			Current:  runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms, InfrastructureMachineTemplate: raw(t, tmpl)},
			Desired:  runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *ms2, InfrastructureMachineTemplate: raw(t, tmpl)},
		}
		var resp runtimehooksv1.CanUpdateMachineSetResponse
		c.call(runtimehooksv1.CanUpdateMachineSet, "upgradekit-can-update-machineset", req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.JSONEq(t, `[{"op":"replace","path":"/spec/template/spec/version","value":"v1.36.1"}]`, string(resp.MachineSetPatch.Patch))
	})

	t.Run("bad requests are Failure responses", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := machinePair()
		cases := []struct {
			name    string
			mutate  func(*runtimehooksv1.CanUpdateMachineRequest)
			message string
		}{
			{"bootstrap config that is not an object", func(r *runtimehooksv1.CanUpdateMachineRequest) {
				r.Desired.BootstrapConfig = runtime.RawExtension{Raw: []byte(`"not an object"`)}
			}, "malformed request: desired.bootstrapConfig is not a JSON object"},
			{"infrastructure machine missing on one side", func(r *runtimehooksv1.CanUpdateMachineRequest) {
				r.Desired.InfrastructureMachine = runtime.RawExtension{}
			}, "incomplete request: desired.infrastructureMachine is missing"},
			{"infrastructure kinds differ", func(r *runtimehooksv1.CanUpdateMachineRequest) {
				r.Desired.InfrastructureMachine = raw(t, map[string]any{"kind": "AWSMachine", "spec": map[string]any{}})
			}, "kind mismatch"},
			{"unknown setting", func(r *runtimehooksv1.CanUpdateMachineRequest) {
				r.Settings = map[string]string{"upgradekit.io/typo": "x"}
			}, `unknown setting "upgradekit.io/typo"`},
			{"bad setting value", func(r *runtimehooksv1.CanUpdateMachineRequest) {
				r.Settings = map[string]string{capi.SettingDisabled: "yes"}
			}, "is not true or false"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				req := &runtimehooksv1.CanUpdateMachineRequest{
					TypeMeta: hookTypeMeta("CanUpdateMachineRequest"),
					Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
					Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)},
				}
				tc.mutate(req)
				var resp runtimehooksv1.CanUpdateMachineResponse
				c.call(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", req, &resp)
				require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
				require.Contains(t, resp.Message, tc.message)
				require.False(t, resp.MachinePatch.IsDefined(), "never a silent accept")
			})
		}
	})

	t.Run("malformed bodies are Failure responses", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := machinePair()
		valid, err := json.Marshal(&runtimehooksv1.CanUpdateMachineRequest{
			TypeMeta: hookTypeMeta("CanUpdateMachineRequest"),
			Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
			Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)},
		})
		require.NoError(t, err)
		wrongKind, err := json.Marshal(&runtimehooksv1.CanUpdateMachineRequest{
			TypeMeta: hookTypeMeta("CanUpdateMachineRequest"),
			Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
			Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, InfrastructureMachine: raw(t, desInfra),
				BootstrapConfig: raw(t, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"a": "b"}})},
		})
		require.NoError(t, err)
		noName := bytes.Replace(valid, []byte(`"name":"`+des.Name+`"`), []byte(`"name":""`), -1)
		require.NotEqual(t, valid, noName)
		// 21 MiB: past the 20 MiB that CAPI's runtime server reads.
		oversized := append(append([]byte(`{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"CanUpdateMachineRequest","settings":{"x":"`),
			bytes.Repeat([]byte("a"), 21<<20)...), []byte(`"}}`)...)
		for _, tc := range []struct {
			name, message string
			body          []byte
		}{
			{"not JSON", "error unmarshalling request", []byte(`{"current": {`)},
			{"a JSON array", "error unmarshalling request", []byte(`[]`)},
			{"a bootstrap config of another kind", "kind mismatch", wrongKind},
			{"no objects at all", "incomplete request: current.machine.metadata.name is missing", []byte(`{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"CanUpdateMachineRequest"}`)},
			{"nameless machines", "incomplete request: current.machine.metadata.name is missing", noName},
			{"oversized", "request body too large", oversized},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var resp runtimehooksv1.CanUpdateMachineResponse
				c.post(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", tc.body, &resp)
				require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
				require.Contains(t, resp.Message, tc.message)
				require.False(t, resp.MachinePatch.IsDefined(), "never a silent accept")
			})
		}
	})

	t.Run("settings: disabled and ignore", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := machinePair()
		desInfra["spec"].(map[string]any)["customImage"] = "kindest/node:v1.36.1"
		base := func() *runtimehooksv1.CanUpdateMachineRequest {
			return &runtimehooksv1.CanUpdateMachineRequest{
				TypeMeta: hookTypeMeta("CanUpdateMachineRequest"),
				Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
				Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)},
			}
		}
		req := base()
		req.Settings = map[string]string{capi.SettingIgnore: "infrastructure.spec.customImage"}
		var resp runtimehooksv1.CanUpdateMachineResponse
		c.call(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.True(t, resp.MachinePatch.IsDefined(), "the image change is ignored, the rest is in place: %s", resp.Message)

		req = base()
		req.Settings = map[string]string{capi.SettingDisabled: "true", capi.SettingIgnore: "infrastructure.spec.customImage"}
		resp = runtimehooksv1.CanUpdateMachineResponse{}
		c.call(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status)
		require.False(t, resp.MachinePatch.IsDefined())
		require.Contains(t, resp.Message, "disabled")
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestHandlersAnnounceTimeoutsAndFailurePolicies: the handlers tell
// Cluster API's discovery how long they may take (UpdateMachine's drain
// diagnosis exceeds the 10-second default) and what to do while the
// extension cannot answer (Fail unless asked otherwise; UpdateMachine
// always Fail).
func TestHandlersAnnounceTimeoutsAndFailurePolicies(t *testing.T) {
	k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	for _, tc := range []struct {
		opts []extOpt
		want runtimehooksv1.FailurePolicy
	}{
		{nil, runtimehooksv1.FailurePolicyFail},
		{[]extOpt{withFailurePolicy(runtimehooksv1.FailurePolicyIgnore)}, runtimehooksv1.FailurePolicyIgnore},
	} {
		ext, err := capi.NewExtension(strategy.Updaters(k8s), extensionOpts(tc.opts...))
		require.NoError(t, err)
		for _, h := range ext.Handlers("x") {
			require.Equal(t, int32(10), *h.TimeoutSeconds, h.Name)
			require.Equal(t, tc.want, *h.FailurePolicy, h.Name)
		}
	}
	_, err := capi.NewExtension(strategy.Updaters(k8s), capi.ExtensionOptions{FailurePolicy: "Sometimes"})
	require.ErrorIs(t, err, capi.ErrInvalidOption)

	u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return nil, nil }, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("img")}})
	require.NoError(t, err)
	h := u.Handler("x")
	require.Equal(t, int32(30), *h.TimeoutSeconds)
	require.Equal(t, runtimehooksv1.FailurePolicyFail, *h.FailurePolicy)
}
