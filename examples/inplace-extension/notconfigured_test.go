package main

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestClusterAPIWaitsForTheUpgraderImageInsteadOfReplacing: a
// MachineDeployment (2) is bumped v1.35.4 -> v1.36.3 while the extension
// has no upgrader image for v1.36.3 (only one for v1.37.2), under Cluster
// API v1.14's own managers. The extension answers CanUpdateMachineSet
// with a Failure, which Cluster API does not remember: it asks again, and
// nothing is replaced meanwhile. The operator then restarts the extension
// with the image: the next question is accepted and the machines are
// updated in place, keeping their names. A decline here would have been
// remembered for 24 hours per MachineSet, and the MachineDeployment
// replaced.
func TestClusterAPIWaitsForTheUpgraderImageInsteadOfReplacing(t *testing.T) {
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterObjects(h.Env, "default", "demo", e2eTo)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	require.NoError(t, clusterapi.Create(ctx, c, clusterapi.MachineDeploymentObjects("default", "demo", "md", 2, e2eFrom)...))
	mdLabel := client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "md"}
	var before map[string]clusterv1.Machine
	waitUntil(t, 4*time.Minute, "machines provisioned", func() (bool, string, error) {
		var err error
		before, err = machinesBy(t, c, mdLabel)
		return err == nil && settled(before, 2, e2eFrom), fmt.Sprintf("machines %v; provider %v", slices.Sorted(maps.Keys(before)), h.Provider.Errors()), err
	})
	names := slices.Sorted(maps.Keys(before))

	dir := t.TempDir()
	testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	first := prometheus.NewRegistry()
	stop := e2eExtensionImages(t, h, dir, port, first, events.NewFakeRecorder(1000), e2eSkip+"="+e2eSkipImage, true)

	var md clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.Version = e2eTo
	require.NoError(t, c.Patch(ctx, &md, patch))

	// Cluster API asks, gets a Failure, and asks again: it remembered
	// nothing. No machine is created or deleted meanwhile.
	waitUntil(t, 3*time.Minute, "Cluster API asks again after a Failure", func() (bool, string, error) {
		ms, err := machinesBy(t, c, mdLabel)
		if err != nil {
			return false, "", err
		}
		if got := slices.Sorted(maps.Keys(ms)); !slices.Equal(got, names) {
			return false, "", fmt.Errorf("machines changed while the extension answered Failure: %v, were %v", got, names)
		}
		d := metricSums(t, first, observe.MetricDecisions, "hook", "outcome")
		return d["CanUpdateMachineSet/error"] >= 2, fmt.Sprintf("decisions %v", d), nil
	})
	d := metricSums(t, first, observe.MetricDecisions, "hook", "outcome")
	require.Zero(t, d["CanUpdateMachineSet/decline"]+d["CanUpdateMachineSet/accept"], "only Failures: %v", d)

	// The operator configures the image and restarts the extension.
	stop()
	second := prometheus.NewRegistry()
	e2eExtensionImages(t, h, dir, port, second, events.NewFakeRecorder(1000), e2eTo+"="+e2eImage, false)

	var after map[string]clusterv1.Machine
	waitUntil(t, 5*time.Minute, "machines updated in place", func() (bool, string, error) {
		var err error
		if after, err = machinesBy(t, c, mdLabel); err != nil {
			return false, "", err
		}
		var st clusterv1.MachineDeployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &st); err != nil {
			return false, "", err
		}
		mdDone := st.Status.ObservedGeneration == st.Generation && ptrIs(st.Status.UpToDateReplicas, 2) && ptrIs(st.Status.AvailableReplicas, 2)
		return settled(after, 2, e2eTo) && mdDone, fmt.Sprintf("machines %v; provider %v", slices.Sorted(maps.Keys(after)), h.Provider.Errors()), nil
	})
	require.Equal(t, names, slices.Sorted(maps.Keys(after)), "no machine replaced")
	for _, n := range names {
		require.Equal(t, before[n].Spec.ProviderID, after[n].Spec.ProviderID, n)
		require.Equal(t, e2eTo, h.Provider.Host(n).RunningVersion(simulator.ComponentKubelet), "%s upgraded on its host", n)
	}
	d = metricSums(t, second, observe.MetricDecisions, "hook", "outcome")
	require.GreaterOrEqual(t, d["CanUpdateMachineSet/accept"], 1.0, "%v", d)
	require.Zero(t, d["CanUpdateMachineSet/decline"], "%v", d)
	require.Equal(t, 2.0, metricSums(t, second, observe.MetricUpdateDuration)[""], "two updates done")
	require.Empty(t, h.Provider.Errors())
}
