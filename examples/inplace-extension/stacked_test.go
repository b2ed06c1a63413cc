package main

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/simulator"
)

// TestClusterAPIUpdatesAStackedEtcdControlPlaneInPlace: three control
// planes with etcd on them (kubeadm's default topology), a real etcd
// member per machine that KubeadmControlPlane reads through the API
// server's port-forward to each etcd Pod (clusterapi.StackedEtcd), taken
// from v1.35.4 to v1.36.3 in place by KubeadmControlPlane v1.14's own
// controller and the extension. Every machine keeps its name; exactly one
// etcd snapshot is taken, on the first control plane, the one that runs
// `kubeadm upgrade apply`, before it; the three members answer, none a
// learner, no alarm, whenever they are asked during the rollout (every
// 250 ms, through a quorum read); KubeadmControlPlane reports etcd
// healthy at the end.
func TestClusterAPIUpdatesAStackedEtcdControlPlaneInPlace(t *testing.T) {
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.KubeadmControlPlaneObjects(h.Env, "default", "stacked", 3, e2eFrom, clusterapi.StackedEtcd())
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	start := time.Now()
	var before map[string]clusterv1.Machine
	waitUntil(t, 5*time.Minute, "KubeadmControlPlane provisioned, etcd healthy", func() (bool, string, error) {
		var ok bool
		before, ok = kcpSettled(t, c, "stacked-cp", 3, e2eFrom)
		healthy := etcdHealthy(t, c, "stacked-cp")
		return ok && healthy == metav1.ConditionTrue, fmt.Sprintf("settled %t, EtcdClusterHealthy %s; provider %v", ok, healthy, h.Provider.Errors()), nil
	})
	t.Logf("3 stacked etcd control planes provisioned in %s", time.Since(start).Round(time.Millisecond))
	cluster := types.NamespacedName{Namespace: "default", Name: "stacked"}

	dir := t.TempDir()
	testcerts.Write(t, dir)
	e2eExtension(t, h, dir, testcerts.FreePort(t), prometheus.NewRegistry(), true)

	var mu sync.Mutex
	var samples int
	var unhealthy []string
	kcpUnhealthy := map[metav1.ConditionStatus]int{}
	stop := every(250*time.Millisecond, func() {
		members, alarms, err := h.Provider.EtcdMembers(ctx, cluster)
		health := etcdHealthy(t, c, "stacked-cp")
		mu.Lock()
		defer mu.Unlock()
		samples++
		kcpUnhealthy[health]++
		switch {
		case err != nil:
			unhealthy = append(unhealthy, err.Error())
		case len(members) != 3 || slices.ContainsFunc(members, func(m clusterapi.EtcdMember) bool { return m.Learner }) || len(alarms) > 0:
			unhealthy = append(unhealthy, fmt.Sprintf("members %+v, alarms %v", members, alarms))
		}
	})
	defer stop()

	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "stacked-cp"}, &kcp))
	patch := client.MergeFrom(kcp.DeepCopy())
	kcp.Spec.Version = e2eTo
	require.NoError(t, c.Patch(ctx, &kcp, patch))
	start = time.Now()
	var after map[string]clusterv1.Machine
	waitUntil(t, 6*time.Minute, "KubeadmControlPlane updated, etcd healthy", func() (bool, string, error) {
		var ok bool
		after, ok = kcpSettled(t, c, "stacked-cp", 3, e2eTo)
		healthy := etcdHealthy(t, c, "stacked-cp")
		return ok && healthy == metav1.ConditionTrue, fmt.Sprintf("settled %t, EtcdClusterHealthy %s, machines %v; provider %v", ok, healthy, machineStates(after), h.Provider.Errors()), nil
	})
	stop()
	t.Logf("3 stacked etcd control planes updated in place in %s", time.Since(start).Round(time.Millisecond))

	names := slices.Sorted(maps.Keys(before))
	require.Equal(t, names, slices.Sorted(maps.Keys(after)), "no control plane replaced")
	var snapshots, applied []string
	for _, name := range names {
		host := h.Provider.Host(name)
		require.Equal(t, e2eTo, host.RunningVersion(simulator.ComponentKubelet), name)
		for i, cmd := range host.Commands() {
			if cmd.Phase != nodeexec.PhaseRun {
				continue
			}
			switch {
			case cmd.Step == kubeadm.StepEtcdSnapshot:
				snapshots = append(snapshots, name)
				require.True(t, slices.ContainsFunc(host.Commands()[i:], upgradeApply), "%s: the snapshot comes before kubeadm upgrade apply", name)
			case upgradeApply(cmd):
				applied = append(applied, name)
			}
		}
	}
	require.Len(t, applied, 1, "exactly one control plane ran `kubeadm upgrade apply`")
	require.Equal(t, applied, snapshots, "exactly one etcd snapshot, on the first control plane")

	mu.Lock()
	defer mu.Unlock()
	t.Logf("etcd asked %d times during the rollout; KubeadmControlPlane's EtcdClusterHealthy at those times: %v", samples, kcpUnhealthy)
	require.Greater(t, samples, 10, "etcd was asked throughout")
	require.Empty(t, unhealthy, "the members answered every time, none a learner, no alarm")
	members, alarms, err := h.Provider.EtcdMembers(ctx, cluster)
	require.NoError(t, err)
	var memberNames []string
	for _, m := range members {
		memberNames = append(memberNames, m.Name)
	}
	require.ElementsMatch(t, names, memberNames, "the same members, named after the machines' Nodes")
	require.Empty(t, alarms)
	require.Empty(t, h.Provider.Errors())
}

// etcdHealthy is the KubeadmControlPlane's EtcdClusterHealthy status.
func etcdHealthy(t *testing.T, c client.Client, name string) metav1.ConditionStatus {
	var kcp controlplanev1.KubeadmControlPlane
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, &kcp); err != nil {
		return metav1.ConditionUnknown
	}
	for _, cond := range kcp.Status.Conditions {
		if cond.Type == controlplanev1.KubeadmControlPlaneEtcdClusterHealthyCondition {
			return cond.Status
		}
	}
	return metav1.ConditionUnknown
}
