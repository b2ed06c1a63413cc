package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestClusterAPISurgesAndDeletesMachinesUpdatingInPlace: a
// MachineDeployment (3) rolling out with maxSurge 1 / maxUnavailable 0 is
// bumped v1.35.4 -> v1.36.3 under Cluster API v1.14's own managers.
// Cluster API surges a new machine and moves old ones to the new
// MachineSet to be updated in place. While an update is in flight (its
// upgrader pod created, held by the node's kubelet) the MachineDeployment
// is scaled down to 2. A MachineSet scaling down deletes machines still
// updating in place first (machineset_deletion_order.go), which would cut
// an update off while its upgrader runs; Cluster API v1.14's rollout
// planner, though, scales nothing down while an in-place update is in
// flight, and this checks that it waits: the machine in flight finishes
// in place, and an old machine that is not updating is deleted. The end
// state is whole: two machines, all up to date at v1.36.3 on their hosts,
// none cordoned, no update record left on a node, no upgrader pod left on
// any remaining node but succeeded ones.
func TestClusterAPISurgesAndDeletesMachinesUpdatingInPlace(t *testing.T) {
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterObjects(h.Env, "default", "demo", e2eTo)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	md := clusterapi.MachineDeploymentObjects("default", "demo", "md", 3, e2eFrom)
	surge, none := intstr.FromInt32(1), intstr.FromInt32(0)
	md[2].(*clusterv1.MachineDeployment).Spec.Rollout.Strategy.RollingUpdate = clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{MaxSurge: &surge, MaxUnavailable: &none}
	require.NoError(t, clusterapi.Create(ctx, c, md...))
	mdLabel := client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "md"}
	var before map[string]clusterv1.Machine
	waitUntil(t, 4*time.Minute, "machines provisioned", func() (bool, string, error) {
		var err error
		before, err = machinesBy(t, c, mdLabel)
		return err == nil && settled(before, 3, e2eFrom), fmt.Sprintf("machines %v; provider %v", slices.Sorted(maps.Keys(before)), h.Provider.Errors()), err
	})

	dir := t.TempDir()
	testcerts.Write(t, dir)
	reg := prometheus.NewRegistry()
	e2eExtensionWith(t, h, dir, testcerts.FreePort(t), reg, events.NewFakeRecorder(1000), true)

	// Watch what happens to the machines: which ones Cluster API deletes
	// while they are updating in place.
	var mu sync.Mutex
	deletedUpdating := map[string]bool{}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ms, err := machinesBy(t, c, mdLabel)
			if err != nil {
				continue
			}
			for n, m := range ms {
				if _, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]; updating && m.DeletionTimestamp != nil {
					mu.Lock()
					deletedUpdating[n] = true
					mu.Unlock()
				}
			}
		}
	}()

	// The old nodes' kubelets hold their pods: the first upgrader Cluster
	// API starts stays in flight until released.
	for n := range before {
		require.True(t, h.Provider.HoldPods(n), n)
	}
	var cur clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &cur))
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Template.Spec.Version = e2eTo
	require.NoError(t, c.Patch(ctx, &cur, patch))

	// A machine is updating in place, its upgrader pod created: the user
	// scales the MachineDeployment down. Cluster API deletes machines
	// updating in place first.
	flying := inFlight(t, c, mdLabel).Name
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &cur))
	patch = client.MergeFrom(cur.DeepCopy())
	cur.Spec.Replicas = new(int32(2))
	require.NoError(t, c.Patch(ctx, &cur, patch))
	// Cluster API v1.14 does not act on the scale-down while the update
	// is in flight (its rollout planner waits for in-place updates):
	// hold the pods a while longer to give it the chance, then release
	// them.
	time.Sleep(10 * time.Second)
	stillThere, err := machinesBy(t, c, mdLabel)
	require.NoError(t, err)
	t.Logf("10 s after the scale-down, the machines are %v", machineStates(stillThere))
	for n := range before {
		h.Provider.ReleasePods(n)
	}

	var after map[string]clusterv1.Machine
	waitUntil(t, 8*time.Minute, "the rollout is done", func() (bool, string, error) {
		var err error
		if after, err = machinesBy(t, c, mdLabel); err != nil {
			return false, "", err
		}
		return settled(after, 2, e2eTo) && mdSettled(t, c, "md", 2), fmt.Sprintf("machines %v; provider %v", machineStates(after), h.Provider.Errors()), nil
	})
	close(stopWatch)
	<-watched

	requireWhole(t, h, after, e2eTo)
	names := slices.Sorted(maps.Keys(after))
	kept := 0
	for _, n := range names {
		if _, old := before[n]; old {
			kept++
		}
	}
	mu.Lock()
	t.Logf("in flight at the scale-down: %s; kept in place: %d; deleted while updating in place: %v; updates done: %v", flying, kept, slices.Sorted(maps.Keys(deletedUpdating)),
		metricSums(t, reg, observe.MetricUpdateDuration))
	// Cluster API v1.14 waits for the update in flight before scaling
	// down (machinedeployment_rollout_rollingupdate.go,
	// scalingOrInPlaceUpdateInProgress): the machine finishes in place and
	// an old machine not being updated is deleted instead.
	require.Empty(t, deletedUpdating, "no machine deleted while updating in place")
	require.Contains(t, after, flying, "the machine in flight finished its update in place")
	mu.Unlock()
	require.Empty(t, h.Provider.Errors())
}

// inFlight waits until a machine of sel is updating in place with its
// upgrader pod created, and returns it.
func inFlight(t *testing.T, c client.Client, sel client.ListOption) clusterv1.Machine {
	t.Helper()
	var found clusterv1.Machine
	waitUntil(t, 4*time.Minute, "an update in flight", func() (bool, string, error) {
		ms, err := machinesBy(t, c, sel)
		if err != nil {
			return false, "", err
		}
		for _, m := range ms {
			if _, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]; updating && m.Status.NodeRef.IsDefined() && len(upgraderPods(t, c, []string{m.Status.NodeRef.Name})) > 0 {
				found = m
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("machines %v", machineStates(ms)), nil
	})
	return found
}

// requireWhole checks the end state of a rollout to version on every
// machine of ms: its host runs the version, its Node is schedulable with
// no update record left, and on those nodes only succeeded upgrader pods
// remain (they stay for their logs). Pods bound to deleted nodes are not
// checked: the harness has no controller-manager, whose pod garbage
// collector removes them in a real cluster.
func requireWhole(t *testing.T, h *clusterapi.Harness, ms map[string]clusterv1.Machine, version string) {
	t.Helper()
	c := h.Env.Client
	var nodes []string
	for _, n := range slices.Sorted(maps.Keys(ms)) {
		m := ms[n]
		require.Equal(t, version, h.Provider.Host(n).RunningVersion(simulator.ComponentKubelet), "%s runs %s on its host", n, version)
		var node corev1.Node
		require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: m.Status.NodeRef.Name}, &node))
		require.False(t, node.Spec.Unschedulable, "%s uncordoned", n)
		require.NotContains(t, node.Annotations, observe.AnnotationInPlaceUpdate, "%s: no update left half done", n)
		nodes = append(nodes, node.Name)
	}
	for _, p := range upgraderPods(t, c, nodes) {
		require.Equal(t, corev1.PodSucceeded, p.Status.Phase, "upgrader pod %s on remaining node %s", p.Name, p.Spec.NodeName)
	}
}

// machineStates says where each Machine is, for a waiting message.
func machineStates(ms map[string]clusterv1.Machine) []string {
	var out []string
	for n, m := range ms {
		s := n + ":" + m.Spec.Version + ":" + m.Status.Phase
		if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
			s += ":updating"
		}
		if m.DeletionTimestamp != nil {
			s += ":deleting"
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// TestClusterAPIDeletesAMachineMidUpdate: a MachineDeployment (3,
// maxSurge 0, maxUnavailable 1) is bumped v1.35.4 -> v1.36.3 under Cluster
// API v1.14's own managers, and the machine being updated in place (its
// upgrader pod created, held by the node's kubelet) is deleted by hand, as
// a user or a MachineHealthCheck would. Cluster API drains and deletes it
// (its own drain evicts the upgrader pod), the MachineSet creates a
// replacement at v1.36.3, and the other machines are updated in place: the
// end state is whole, three machines at v1.36.3 on their hosts, none
// cordoned, no update record left on a remaining node, no upgrader pod left
// but succeeded ones on remaining nodes, and the deleted machine's Node
// gone with it.
func TestClusterAPIDeletesAMachineMidUpdate(t *testing.T) {
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterObjects(h.Env, "default", "demo", e2eTo)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	require.NoError(t, clusterapi.Create(ctx, c, clusterapi.MachineDeploymentObjects("default", "demo", "md", 3, e2eFrom)...))
	mdLabel := client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "md"}
	var before map[string]clusterv1.Machine
	waitUntil(t, 4*time.Minute, "machines provisioned", func() (bool, string, error) {
		var err error
		before, err = machinesBy(t, c, mdLabel)
		return err == nil && settled(before, 3, e2eFrom), fmt.Sprintf("machines %v; provider %v", slices.Sorted(maps.Keys(before)), h.Provider.Errors()), err
	})

	dir := t.TempDir()
	testcerts.Write(t, dir)
	reg := prometheus.NewRegistry()
	e2eExtension(t, h, dir, testcerts.FreePort(t), reg, true)

	for n := range before {
		require.True(t, h.Provider.HoldPods(n), n)
	}
	var cur clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &cur))
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Template.Spec.Version = e2eTo
	require.NoError(t, c.Patch(ctx, &cur, patch))

	deleted := inFlight(t, c, mdLabel)
	require.NoError(t, c.Delete(ctx, &deleted), "the machine updating in place deleted by hand")
	for n := range before {
		h.Provider.ReleasePods(n)
	}

	var after map[string]clusterv1.Machine
	waitUntil(t, 8*time.Minute, "the rollout is done", func() (bool, string, error) {
		var err error
		if after, err = machinesBy(t, c, mdLabel); err != nil {
			return false, "", err
		}
		return settled(after, 3, e2eTo) && mdSettled(t, c, "md", 3), fmt.Sprintf("machines %v; provider %v", machineStates(after), h.Provider.Errors()), nil
	})

	require.NotContains(t, after, deleted.Name, "the deleted machine is gone")
	var gone corev1.Node
	require.True(t, apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: deleted.Status.NodeRef.Name}, &gone)), "its Node is gone with it")
	requireWhole(t, h, after, e2eTo)
	kept := 0
	for n := range after {
		if _, old := before[n]; old {
			kept++
		}
	}
	require.Equal(t, 2, kept, "the two other machines updated in place, one new machine for the deleted one")
	require.Empty(t, h.Provider.Errors())
}
