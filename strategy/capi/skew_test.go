package capi_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

func TestControlPlaneSkewCheck(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clusterv1.AddToScheme(scheme))
	require.NoError(t, controlplanev1.AddToScheme(scheme))
	cp := func(name, v string) client.Object {
		return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels: map[string]string{clusterv1.ClusterNameLabel: "demo", clusterv1.MachineControlPlaneLabel: ""}},
			Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: v}}
	}
	otherCluster := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "other-cp", Namespace: "default",
		Labels: map[string]string{clusterv1.ClusterNameLabel: "other", clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{ClusterName: "other", Version: "v1.29.0"}}
	kubeadm := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	// A Cluster whose control plane is a KubeadmControlPlane desired at v.
	kcp := func(v string) []client.Object {
		return []client.Object{
			&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
				Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: "demo-cp"}}},
			&controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Name: "demo-cp", Namespace: "default"},
				Spec: controlplanev1.KubeadmControlPlaneSpec{Version: v}},
		}
	}

	for _, tc := range []struct {
		name         string
		objs         []client.Object
		controlPlane bool
		to           string
		status       runtimehooksv1.ResponseStatus
		accept       bool
		message      string
	}{
		{"control plane upgraded", []client.Object{cp("cp-a", "v1.36.1"), cp("cp-b", "v1.36.0"), otherCluster}, false, "v1.36.1",
			runtimehooksv1.ResponseStatusSuccess, true, "in place by kubeadm"},
		{"control plane halfway, no control plane object", []client.Object{cp("cp-a", "v1.36.1"), cp("cp-b", "v1.35.4")}, false, "v1.36.1",
			runtimehooksv1.ResponseStatusSuccess, false, "newer than the control plane (machine cp-b is at v1.35.4)"},
		// KubeadmControlPlane writes a machine's new version only when it
		// updates that machine: halfway is on its way, not a reason to
		// decline (UpdateMachine waits for it).
		{"KubeadmControlPlane halfway to the version", append(kcp("v1.36.1"), cp("cp-a", "v1.36.1"), cp("cp-b", "v1.35.4")), false, "v1.36.1",
			runtimehooksv1.ResponseStatusSuccess, true, "in place by kubeadm"},
		{"KubeadmControlPlane bumped, no machine updated yet", append(kcp("v1.36.0"), cp("cp-a", "v1.35.4"), cp("cp-b", "v1.35.4")), false, "v1.36.1",
			runtimehooksv1.ResponseStatusSuccess, true, "in place by kubeadm"},
		{"KubeadmControlPlane desired below the target", append(kcp("v1.35.4"), cp("cp-a", "v1.35.4")), false, "v1.36.1",
			runtimehooksv1.ResponseStatusSuccess, false, "newer than the control plane, whose desired version is v1.35.4 (KubeadmControlPlane demo-cp)"},
		{"KubeadmControlPlane with an unreadable version", append(kcp("latest"), cp("cp-a", "v1.36.1")), false, "v1.36.1",
			runtimehooksv1.ResponseStatusFailure, false, `KubeadmControlPlane default/demo-cp: spec.version "latest"`},
		{"a patch within the control plane's minor", []client.Object{cp("cp-a", "v1.35.4")}, false, "v1.35.5",
			runtimehooksv1.ResponseStatusSuccess, true, "in place by kubeadm"},
		{"a control plane machine is KubeadmControlPlane's to order", []client.Object{cp("cp-b", "v1.35.4")}, true, "v1.36.1",
			runtimehooksv1.ResponseStatusSuccess, true, "in place by kubeadm"},
		{"no control plane machines (managed)", nil, false, "v1.36.1",
			runtimehooksv1.ResponseStatusSuccess, true, "in place by kubeadm"},
		{"an unreadable control plane version", []client.Object{cp("cp-a", "latest")}, false, "v1.36.1",
			runtimehooksv1.ResponseStatusFailure, false, `machine default/cp-a: spec.version "latest"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
			cur.Spec.Version, des.Spec.Version = "v1.35.4", tc.to
			if tc.controlPlane {
				cur.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: ""}
				des.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: ""}
			}
			// The machine asked about is in the management cluster, as
			// Cluster API's always is.
			mgmt := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(append(tc.objs, cur.DeepCopy())...).Build()
			ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{Checks: []capi.Check{capi.ControlPlaneSkewCheck(mgmt)}})
			require.NoError(t, err)
			resp := canUpdateMachine(t, ext, nil, cur, des, curCfg, desCfg, curInfra, desInfra)
			require.Equal(t, tc.status, resp.Status, resp.Message)
			require.Contains(t, resp.Message, tc.message)
			require.Equal(t, tc.accept, resp.MachinePatch.IsDefined(), resp.Message)
		})
	}

	t.Run("a check on the MachineSet request", func(t *testing.T) {
		ms := &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "md-0", Namespace: "default"}, Spec: clusterv1.MachineSetSpec{ClusterName: "demo"}}
		ms.Spec.Template.Spec.Version = "v1.35.4"
		mgmt := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(cp("cp-a", "v1.35.4"), ms.DeepCopy()).Build()
		check := capi.ControlPlaneSkewCheck(mgmt)
		d := strategy.Decision{Outcome: strategy.OutcomeInPlace, InPlace: diff.ChangeSet{Changes: []diff.Change{{Category: diff.CategoryKubernetesVersion}}}}
		err := check.Check(context.Background(), capi.CheckRequest{Templates: true, FromVersion: "v1.35.4", ToVersion: "v1.36.1", Decision: d,
			Current: diff.State{Machine: ms}, Desired: diff.State{Machine: ms}})
		require.ErrorIs(t, err, capi.ErrInfeasible)
		require.ErrorContains(t, err, "upgrade the control plane first")
	})

	// A request forged for another cluster learns nothing of it: an
	// attacker who can reach the extension's Service and names cluster
	// "demo" (or a machine that is not there, or not at that version) gets
	// a Failure that names no machine and no version.
	t.Run("forged requests learn nothing", func(t *testing.T) {
		cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
		cur.Spec.Version, des.Spec.Version = "v1.35.4", "v1.36.1"
		live := cur.DeepCopy()
		for name, tc := range map[string]struct {
			objs  []client.Object
			forge func(m *clusterv1.Machine)
		}{
			"machine not in the management cluster": {nil, func(*clusterv1.Machine) {}},
			"another cluster's name":                {[]client.Object{live}, func(m *clusterv1.Machine) { m.Spec.ClusterName = "other" }},
			"another version than the live machine": {[]client.Object{live}, func(m *clusterv1.Machine) { m.Spec.Version = "v1.35.1" }},
		} {
			t.Run(name, func(t *testing.T) {
				objs := append([]client.Object{cp("cp-a", "v1.35.4"), otherCluster.DeepCopy()}, tc.objs...)
				mgmt := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
				ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{Checks: []capi.Check{capi.ControlPlaneSkewCheck(mgmt)}})
				require.NoError(t, err)
				c, d := cur.DeepCopy(), des.DeepCopy()
				tc.forge(c)
				d.Spec.ClusterName = c.Spec.ClusterName
				resp := canUpdateMachine(t, ext, nil, c, d, curCfg, desCfg, curInfra, desInfra)
				require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
				require.Contains(t, resp.Message, capi.ErrRequestMismatch.Error())
				for _, leak := range []string{"cp-a", "other-cp", "v1.29", "v1.35.4"} {
					require.NotContains(t, resp.Message, leak)
				}
				require.False(t, resp.MachinePatch.IsDefined())
			})
		}
	})
}
