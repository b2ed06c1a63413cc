package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/upgradekit/upgradekit/fake/envtest"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// TestDeployManifestsApply applies deploy/extension.yaml to a real API
// server with the CAPI CRDs (server-side validation included), except the
// cert-manager objects, whose CRDs are not installed there.
func TestDeployManifestsApply(t *testing.T) {
	raw, err := os.ReadFile("deploy/extension.yaml")
	require.NoError(t, err)
	env := envtest.StartForTest(t)
	ctx := context.Background()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	kinds := map[string]int{}
	for {
		var obj unstructured.Unstructured
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if obj.Object == nil {
			continue
		}
		kinds[obj.GetKind()]++
		if obj.GetKind() == "ClusterRole" {
			var role rbacv1.ClusterRole
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role))
			// Exactly what the extension does in the management cluster:
			// read kubeconfig secrets, list control plane Machines, record
			// Events on Machines.
			require.Empty(t, cmp.Diff([]rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
				{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"machines"}, Verbs: []string{"get", "list"}},
				{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			}, role.Rules))
		}
		if obj.GroupVersionKind().Group == "cert-manager.io" {
			continue
		}
		require.NoError(t, env.Client.Create(ctx, &obj), "%s %s", obj.GetKind(), obj.GetName())
	}
	require.Equal(t, map[string]int{"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1,
		"Issuer": 1, "Certificate": 1, "Service": 1, "Deployment": 1, "ExtensionConfig": 1}, kinds)
}

// TestDeployArgsParse: the Deployment's args are flags the binary accepts,
// and they give the upgrader pod examples/upgrader's bundle image expects.
func TestDeployArgsParse(t *testing.T) {
	raw, err := os.ReadFile("deploy/extension.yaml")
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var args []string
	for {
		var obj unstructured.Unstructured
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if obj.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d))
		require.Len(t, d.Spec.Template.Spec.Containers, 1)
		args = d.Spec.Template.Spec.Containers[0].Args
	}
	require.NotEmpty(t, args, "deploy/extension.yaml has a Deployment with args")
	o, err := parseFlags(args, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "registry.example/upgradekit-upgrader:v1.31.1", o.upgraderImage)
	require.Equal(t, []string{"/upgrader", "run"}, o.runnerArgv)
	require.Equal(t, "/staging", o.stageFrom)
	require.Equal(t, nodepod.ModeInitContainers, o.mode)
	require.Equal(t, map[string]bool{kubeadm.StepContainerd: true, kubeadm.StepCNIPlugins: true}, o.skip)
}
