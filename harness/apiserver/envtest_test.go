package apiserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

func TestStartReportsMissingAssets(t *testing.T) {
	dir := t.TempDir()
	// One of the two binaries present, and not executable: both count as missing.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etcd"), []byte("#!/bin/sh\n"), 0o644))

	_, err := apiserver.Start(context.Background(), apiserver.WithAssetsDir(dir))
	require.Error(t, err)
	require.ErrorIs(t, err, apiserver.ErrAssetsMissing)
	var missing *apiserver.AssetsMissingError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, dir, missing.Dir)
	require.Equal(t, []string{"kube-apiserver", "etcd"}, missing.Missing)
	require.Contains(t, err.Error(), apiserver.AssetsCommand, "the error must name the command that builds the binaries")
	require.Contains(t, err.Error(), apiserver.SkipEnvVar)
}

func TestCAPICRDPathsComeFromTheModuleWeBuildWith(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	paths, err := apiserver.CAPICRDPaths(ctx)
	require.NoError(t, err)
	require.Len(t, paths, 3)
	for _, p := range paths {
		require.Contains(t, p, "cluster-api@v1.14.2", "CRDs must come from the pinned cluster-api module")
	}
	_, err = os.Stat(filepath.Join(paths[0], "cluster.x-k8s.io_machines.yaml"))
	require.NoError(t, err)
}

// TestRealAPIServerRoundTrip drives a real kube-apiserver with the CAPI v1beta2
// CRDs: a Cluster, a KubeadmControlPlane, a MachineDeployment, Machines with
// KubeadmConfigs and a Node are created and read back; a Machine's version is
// updated; invalid objects are rejected by the CRD schema.
func TestRealAPIServerRoundTrip(t *testing.T) {
	env := apiserver.StartForTest(t)
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "upgradekit-it"}}
	require.NoError(t, c.Create(ctx, ns))

	infraRef := func(kind, name string) clusterv1.ContractVersionedObjectReference {
		return clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: kind, Name: name}
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns.Name},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: "demo-cp",
			},
			InfrastructureRef: infraRef("DockerCluster", "demo"),
		},
	}
	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-cp", Namespace: ns.Name},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Replicas: ptr.To[int32](3),
			Version:  "v1.30.4",
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{
				Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
					InfrastructureRef: infraRef("DockerMachineTemplate", "demo-cp"),
				},
			},
			KubeadmConfigSpec: bootstrapv1.KubeadmConfigSpec{
				ClusterConfiguration: bootstrapv1.ClusterConfiguration{ImageRepository: "registry.k8s.io"},
			},
		},
	}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-md-0", Namespace: ns.Name},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: "demo",
			Replicas:    ptr.To[int32](2),
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{"pool": "md-0"}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"pool": "md-0"}},
				Spec: clusterv1.MachineSpec{
					ClusterName: "demo",
					Version:     "v1.30.4",
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: "demo-md-0",
					}},
					InfrastructureRef: infraRef("DockerMachineTemplate", "demo-md-0"),
				},
			},
		},
	}
	for _, obj := range []client.Object{cluster, kcp, md} {
		require.NoError(t, c.Create(ctx, obj), "create %T", obj)
	}

	for i, name := range []string{"demo-md-0-a", "demo-md-0-b"} {
		cfg := &bootstrapv1.KubeadmConfig{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
			Spec: bootstrapv1.KubeadmConfigSpec{
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
					KubeletExtraArgs: []bootstrapv1.Arg{{Name: "node-labels", Value: ptr.To("pool=md-0")}},
				}},
				Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "managed by upgradekit", Permissions: "0644"}},
			},
		}
		require.NoError(t, c.Create(ctx, cfg))
		m := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name, Labels: map[string]string{
				clusterv1.ClusterNameLabel: "demo", "pool": "md-0",
			}},
			Spec: clusterv1.MachineSpec{
				ClusterName: "demo",
				Version:     "v1.30.4",
				ProviderID:  "docker:////" + name,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name,
				}},
				InfrastructureRef: infraRef("DockerMachine", name),
			},
		}
		require.NoError(t, c.Create(ctx, m))
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "md-0"}},
			Spec:       corev1.NodeSpec{ProviderID: m.Spec.ProviderID},
		}
		require.NoError(t, c.Create(ctx, node))
		node.Status.NodeInfo.KubeletVersion = "v1.30.4"
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		require.NoError(t, c.Status().Update(ctx, node), "node %d status", i)
	}

	// Read back through the API server: the schema kept what we wrote.
	var gotKCP controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(kcp), &gotKCP))
	require.Equal(t, "v1.30.4", gotKCP.Spec.Version)
	require.Equal(t, "registry.k8s.io", gotKCP.Spec.KubeadmConfigSpec.ClusterConfiguration.ImageRepository)

	var machines clusterv1.MachineList
	require.NoError(t, c.List(ctx, &machines, client.InNamespace(ns.Name), client.MatchingLabels{"pool": "md-0"}))
	require.Len(t, machines.Items, 2)

	var cfg bootstrapv1.KubeadmConfig
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "demo-md-0-a"}, &cfg))
	require.Equal(t, "pool=md-0", *cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs[0].Value)
	require.Equal(t, "/etc/motd", cfg.Spec.Files[0].Path)

	var node corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "demo-md-0-a"}, &node))
	require.Equal(t, "v1.30.4", node.Status.NodeInfo.KubeletVersion)
	require.Equal(t, "docker:////demo-md-0-a", node.Spec.ProviderID)

	// Update spec.version: the server bumps resourceVersion, and a stale
	// write loses with a Conflict, as it would against a real cluster.
	m := machines.Items[0].DeepCopy()
	stale := m.DeepCopy()
	m.Spec.Version = "v1.31.1"
	require.NoError(t, c.Update(ctx, m))
	require.NotEqual(t, stale.ResourceVersion, m.ResourceVersion)
	var got clusterv1.Machine
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(m), &got))
	require.Equal(t, "v1.31.1", got.Spec.Version)
	stale.Spec.Version = "v1.29.0"
	err := c.Update(ctx, stale)
	require.True(t, apierrors.IsConflict(err), "stale update must conflict, got %v", err)

	// Real validation runs: the CRD's OpenAPI schema rejects these.
	invalid := []struct {
		name  string
		obj   client.Object
		field string
	}{
		{
			name: "machine without clusterName",
			obj: &clusterv1.Machine{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-1", Namespace: ns.Name},
				Spec: clusterv1.MachineSpec{
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("s")},
					InfrastructureRef: infraRef("DockerMachine", "bad-1"),
				},
			},
			field: "spec.clusterName",
		},
		{
			name: "machine taint with an unknown effect",
			obj: &clusterv1.Machine{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-2", Namespace: ns.Name},
				Spec: clusterv1.MachineSpec{
					ClusterName:       "demo",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("s")},
					InfrastructureRef: infraRef("DockerMachine", "bad-2"),
					Taints:            []clusterv1.MachineTaint{{Key: "k", Effect: "Sometimes", Propagation: clusterv1.MachineTaintPropagationAlways}},
				},
			},
			field: "spec.taints[0].effect",
		},
		{
			name: "kubeadm control plane with an empty version",
			obj: &controlplanev1.KubeadmControlPlane{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-3", Namespace: ns.Name},
				Spec: controlplanev1.KubeadmControlPlaneSpec{
					MachineTemplate: kcp.Spec.MachineTemplate,
				},
			},
			field: "spec.version",
		},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, tc.obj)
			require.Error(t, err)
			require.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			var status apierrors.APIStatus
			require.True(t, errors.As(err, &status))
			var fields []string
			for _, cause := range status.Status().Details.Causes {
				fields = append(fields, cause.Field)
			}
			require.Contains(t, fields, tc.field, "causes: %v", err)
		})
	}
}
