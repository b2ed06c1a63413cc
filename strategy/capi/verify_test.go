package capi_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

func verifyRequest(fromVersion, toVersion, fromImage, toImage, desiredBootstrap string) *runtimehooksv1.CanUpdateMachineRequest {
	machine := func(v string) clusterv1.Machine {
		m := clusterv1.Machine{Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: v}}
		m.Name, m.Namespace = "m", "default"
		return m
	}
	infra := func(img string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"kind":"DockerMachine","spec":{"customImage":"` + img + `"}}`)}
	}
	return &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine(fromVersion), InfrastructureMachine: infra(fromImage),
			BootstrapConfig: runtime.RawExtension{Raw: []byte(`{"kind":"KubeadmConfig","spec":{}}`)}},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine(toVersion), InfrastructureMachine: infra(toImage),
			BootstrapConfig: runtime.RawExtension{Raw: []byte(desiredBootstrap)}},
	}
}

func jsonPatch(p string) runtimehooksv1.Patch {
	return runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: []byte(p)}
}

// TestVerifyCanUpdateMachine: the verifier accepts an answer whose
// patches leave nothing for Cluster API to roll, and names what is left
// otherwise, including what only Cluster API's strict comparison sees (an
// empty list against an absent field).
func TestVerifyCanUpdateMachine(t *testing.T) {
	const emptyBootstrap = `{"kind":"KubeadmConfig","spec":{}}`
	version := jsonPatch(`[{"op":"replace","path":"/spec/version","value":"v1.36.1"}]`)
	for _, tc := range []struct {
		name   string
		req    *runtimehooksv1.CanUpdateMachineRequest
		resp   *runtimehooksv1.CanUpdateMachineResponse
		left   []string
		target error
	}{
		{name: "the version patched: in place",
			req:  verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", emptyBootstrap),
			resp: &runtimehooksv1.CanUpdateMachineResponse{MachinePatch: version}},
		{name: "nothing to change, no patch: in place",
			req:  verifyRequest("v1.35.4", "v1.35.4", "node:a", "node:a", emptyBootstrap),
			resp: &runtimehooksv1.CanUpdateMachineResponse{}},
		{name: "an accept that leaves the image: rolled out",
			req:    verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:b", emptyBootstrap),
			resp:   &runtimehooksv1.CanUpdateMachineResponse{MachinePatch: version},
			left:   []string{"infrastructure.spec.customImage (InfrastructureImage)"},
			target: capi.ErrWouldRollOut},
		{name: "an empty list is not an absent field",
			req:    verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", `{"kind":"KubeadmConfig","spec":{"files":[]}}`),
			resp:   &runtimehooksv1.CanUpdateMachineResponse{MachinePatch: version},
			left:   []string{"bootstrap.spec.files (Files)"},
			target: capi.ErrWouldRollOut},
		{name: "and patched in, it is",
			req: verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", `{"kind":"KubeadmConfig","spec":{"files":[]}}`),
			resp: &runtimehooksv1.CanUpdateMachineResponse{MachinePatch: version,
				BootstrapConfigPatch: jsonPatch(`[{"op":"add","path":"/spec/files","value":[]}]`)}},
		{name: "a merge patch",
			req:  verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:b", emptyBootstrap),
			resp: &runtimehooksv1.CanUpdateMachineResponse{MachinePatch: version, InfrastructureMachinePatch: runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONMergePatchType, Patch: []byte(`{"spec":{"customImage":"node:b"}}`)}}},
		{name: "a patch outside spec is dropped, as Cluster API drops it",
			req: verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", emptyBootstrap),
			resp: &runtimehooksv1.CanUpdateMachineResponse{
				MachinePatch: jsonPatch(`[{"op":"replace","path":"/spec/version","value":"v1.36.1"},{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`)}},
		{name: "Failure is no answer",
			req:    verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", emptyBootstrap),
			resp:   &runtimehooksv1.CanUpdateMachineResponse{CommonResponse: runtimehooksv1.CommonResponse{Status: runtimehooksv1.ResponseStatusFailure, Message: "boom"}},
			target: capi.ErrNotAnAnswer},
		{name: "nil response", req: verifyRequest("v1.35.4", "v1.36.1", "a", "a", emptyBootstrap), target: capi.ErrNotAnAnswer},
		{name: "a patch that does not apply",
			req:  verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", emptyBootstrap),
			resp: &runtimehooksv1.CanUpdateMachineResponse{MachinePatch: jsonPatch(`[{"op":"remove","path":"/spec/nosuch"}]`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := capi.VerifyCanUpdateMachine(tc.req, tc.resp)
			switch {
			case tc.target != nil:
				require.ErrorIs(t, err, tc.target)
			case tc.left == nil && tc.name == "a patch that does not apply":
				require.ErrorIs(t, err, capi.ErrInvalidPatch)
				require.False(t, errors.Is(err, capi.ErrWouldRollOut))
				return
			default:
				require.NoError(t, err)
			}
			var ro *capi.RollOutError
			if tc.left != nil {
				require.ErrorAs(t, err, &ro)
				require.Equal(t, tc.left, ro.Fields)
				require.Contains(t, err.Error(), tc.left[0])
			}
		})
	}
}

// TestVerifyCanUpdateMachineSet: templates compare spec.template.spec.
func TestVerifyCanUpdateMachineSet(t *testing.T) {
	ms := func(v string) clusterv1.MachineSet {
		m := clusterv1.MachineSet{Spec: clusterv1.MachineSetSpec{ClusterName: "demo", Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: v}}}}
		m.Name, m.Namespace = "ms", "default"
		return m
	}
	tmpl := runtime.RawExtension{Raw: []byte(`{"kind":"DockerMachineTemplate","spec":{"template":{"spec":{"customImage":"node:a"}}}}`)}
	req := &runtimehooksv1.CanUpdateMachineSetRequest{
		Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms("v1.35.4"), InfrastructureMachineTemplate: tmpl},
		Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms("v1.36.1"), InfrastructureMachineTemplate: tmpl},
	}
	err := capi.VerifyCanUpdateMachineSet(req, &runtimehooksv1.CanUpdateMachineSetResponse{})
	var ro *capi.RollOutError
	require.ErrorAs(t, err, &ro)
	require.Equal(t, []string{"machine.spec.template.spec.version (KubernetesVersion)"}, ro.Fields)
	require.NoError(t, capi.VerifyCanUpdateMachineSet(req, &runtimehooksv1.CanUpdateMachineSetResponse{
		MachineSetPatch: jsonPatch(`[{"op":"replace","path":"/spec/template/spec/version","value":"v1.36.1"}]`)}))
	require.ErrorIs(t, capi.VerifyCanUpdateMachineSet(nil, nil), capi.ErrNotAnAnswer)

	// A template stored without a spec (an empty KubeadmConfigTemplate is)
	// reaches the hook as "spec": null, and Cluster API v1.14.2 cannot set
	// spec.template.spec under it: the call fails and the rollout stalls
	// (found by the preview's truth test under Cluster API's controllers).
	emptyKCT := runtime.RawExtension{Raw: []byte(`{"apiVersion":"bootstrap.cluster.x-k8s.io/v1beta2","kind":"KubeadmConfigTemplate","metadata":{"name":"kct-0"},"spec":null}`)}
	withArg := runtime.RawExtension{Raw: []byte(`{"apiVersion":"bootstrap.cluster.x-k8s.io/v1beta2","kind":"KubeadmConfigTemplate","metadata":{"name":"kct-1"},"spec":{"template":{"spec":{"joinConfiguration":{"nodeRegistration":{"kubeletExtraArgs":[{"name":"max-pods","value":"50"}]}}}}}}`)}
	nullReq := &runtimehooksv1.CanUpdateMachineSetRequest{
		Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms("v1.35.4"), InfrastructureMachineTemplate: tmpl, BootstrapConfigTemplate: emptyKCT},
		Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms("v1.35.4"), InfrastructureMachineTemplate: tmpl, BootstrapConfigTemplate: withArg},
	}
	err = capi.VerifyCanUpdateMachineSet(nullReq, &runtimehooksv1.CanUpdateMachineSetResponse{
		BootstrapConfigTemplatePatch: jsonPatch(`[{"op":"add","path":"/spec","value":{"template":{"spec":{"joinConfiguration":{"nodeRegistration":{"kubeletExtraArgs":[{"name":"max-pods","value":"50"}]}}}}}}]`)})
	require.ErrorIs(t, err, capi.ErrInvalidPatch)
	require.ErrorContains(t, err, "spec is null in the current object")
	// An empty patch is not applied at all, so it cannot fail.
	nullReq.Desired.BootstrapConfigTemplate = emptyKCT
	require.NoError(t, capi.VerifyCanUpdateMachineSet(nullReq, &runtimehooksv1.CanUpdateMachineSetResponse{
		BootstrapConfigTemplatePatch: jsonPatch(`[]`)}))
	require.NoError(t, capi.VerifyCanUpdateMachineSet(nullReq, &runtimehooksv1.CanUpdateMachineSetResponse{
		BootstrapConfigTemplatePatch: runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONMergePatchType, Patch: []byte(`{}`)}}))

	// The extension declines instead of answering what Cluster API cannot
	// apply: Cluster API replaces the machines rather than stalling.
	ext, err := capi.NewExtension(strategy.Updaters(must(strategy.ForPaths("kubelet-args", strategy.KubeletExtraArgsPaths()...))), capi.ExtensionOptions{})
	require.NoError(t, err)
	nullReq.Desired.BootstrapConfigTemplate = withArg
	a, err := ext.AnswerCanUpdateMachineSet(t.Context(), nullReq)
	require.NoError(t, err)
	require.False(t, a.Accept, a.Message)
	require.Contains(t, a.Message, "Cluster API cannot set spec.template.spec")
}

// Check, in your extension's tests, that an answer is one Cluster API
// honours: here an accept that forgot the machine image.
func ExampleVerifyCanUpdateMachine() {
	req := verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:b", `{"kind":"KubeadmConfig","spec":{}}`)
	resp := &runtimehooksv1.CanUpdateMachineResponse{MachinePatch: jsonPatch(`[{"op":"replace","path":"/spec/version","value":"v1.36.1"}]`)}
	err := capi.VerifyCanUpdateMachine(req, resp)
	fmt.Println(errors.Is(err, capi.ErrWouldRollOut))
	fmt.Println(err)
	// Output:
	// true
	// would be rolled out by Cluster API, not updated in place: the patched objects still differ in infrastructure.spec.customImage (InfrastructureImage)
}
