package capi_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestAnswerIsTheHooksAnswer: AnswerCanUpdateMachine gives, typed, what
// the hook writes: an accept with its updaters and patches (which verify),
// a decline with the fields that made it, a Failure as an error.
func TestAnswerIsTheHooksAnswer(t *testing.T) {
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{})
	require.NoError(t, err)
	ctx := context.Background()

	for _, tc := range []struct {
		name     string
		req      *runtimehooksv1.CanUpdateMachineRequest
		accept   bool
		updaters []string
		declined []string
	}{
		{name: "version: accepted", req: verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", `{"kind":"KubeadmConfig","spec":{}}`),
			accept: true, updaters: []string{"kubeadm"}},
		{name: "image: declined", req: verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:b", `{"kind":"KubeadmConfig","spec":{}}`),
			updaters: []string{"kubeadm"}, // the version alone would have been in place
			declined: []string{"infrastructure.spec.customImage (InfrastructureImage)"}},
		{name: "no changes: accepted", req: verifyRequest("v1.35.4", "v1.35.4", "node:a", "node:a", `{"kind":"KubeadmConfig","spec":{}}`),
			accept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ext.AnswerCanUpdateMachine(ctx, tc.req)
			require.NoError(t, err)
			require.Equal(t, tc.accept, a.Accept, a.Message)
			require.Equal(t, tc.updaters, a.Decision.Updaters())
			require.Equal(t, tc.declined, a.Declined)

			var resp runtimehooksv1.CanUpdateMachineResponse
			ext.CanUpdateMachine(ctx, tc.req, &resp)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status)
			require.Equal(t, a.Message, resp.Message, "the hook writes the answer")
			require.Equal(t, a.MachinePatch, resp.MachinePatch)
			require.Equal(t, a.BootstrapPatch, resp.BootstrapConfigPatch)
			require.Equal(t, a.InfrastructurePatch, resp.InfrastructureMachinePatch)
			if a.Accept {
				require.NoError(t, capi.VerifyCanUpdateMachine(tc.req, &resp), "an accept Cluster API honours")
			} else {
				require.ErrorIs(t, capi.VerifyCanUpdateMachine(tc.req, &resp), capi.ErrWouldRollOut)
			}
		})
	}

	incomplete := verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", `{}`)
	incomplete.Desired.InfrastructureMachine.Raw = nil
	_, err = ext.AnswerCanUpdateMachine(ctx, incomplete)
	require.ErrorIs(t, err, capi.ErrIncompleteRequest)
	_, err = ext.AnswerCanUpdateMachineSet(ctx, nil)
	require.Error(t, err)
	var zero *capi.Extension
	_, err = zero.AnswerCanUpdateMachine(ctx, incomplete)
	require.ErrorIs(t, err, capi.ErrInvalidOption)
}

// TestMalformedRequestsFail: a request whose objects are not JSON objects
// or whose spec is not an object is a Failure naming the field, the same
// answer for every such shape, never a decline (which would have Cluster
// API replace a machine over garbage).
func TestMalformedRequestsFail(t *testing.T) {
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{})
	require.NoError(t, err)
	for _, tc := range []struct {
		name, infra, bootstrap, field string
	}{
		{"spec is a string", `{"kind":"DockerMachine","spec":"garbage"}`, `{"kind":"KubeadmConfig","spec":{}}`, "desired.infrastructureMachine.spec"},
		{"spec is a list", `{"kind":"DockerMachine","spec":[1]}`, `{"kind":"KubeadmConfig","spec":{}}`, "desired.infrastructureMachine.spec"},
		{"bootstrap spec is a number", `{"kind":"DockerMachine","spec":{}}`, `{"kind":"KubeadmConfig","spec":3}`, "desired.bootstrapConfig.spec"},
		{"not JSON", `{"kind":`, `{"kind":"KubeadmConfig","spec":{}}`, "desired.infrastructureMachine"},
		{"not an object", `[]`, `{"kind":"KubeadmConfig","spec":{}}`, "desired.infrastructureMachine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := verifyRequest("v1.35.4", "v1.36.1", "node:a", "node:a", tc.bootstrap)
			req.Desired.InfrastructureMachine = runtime.RawExtension{Raw: []byte(tc.infra)}
			_, err := ext.AnswerCanUpdateMachine(context.Background(), req)
			require.ErrorIs(t, err, capi.ErrMalformedRequest)
			require.Contains(t, err.Error(), tc.field)
			var resp runtimehooksv1.CanUpdateMachineResponse
			ext.CanUpdateMachine(context.Background(), req, &resp)
			require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		})
	}
	// MachineSet templates: spec.template.spec.
	ms := &runtimehooksv1.CanUpdateMachineSetRequest{}
	ms.Current.MachineSet.Name, ms.Desired.MachineSet.Name = "ms", "ms"
	ms.Current.InfrastructureMachineTemplate = runtime.RawExtension{Raw: []byte(`{"kind":"T","spec":{"template":{"spec":{}}}}`)}
	ms.Desired.InfrastructureMachineTemplate = runtime.RawExtension{Raw: []byte(`{"kind":"T","spec":{"template":{"spec":"x"}}}`)}
	_, err = ext.AnswerCanUpdateMachineSet(context.Background(), ms)
	require.ErrorIs(t, err, capi.ErrMalformedRequest)
	require.Contains(t, err.Error(), "desired.infrastructureMachineTemplate.spec.template.spec is a string")
}
