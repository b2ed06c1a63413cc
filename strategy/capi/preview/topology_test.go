package preview

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/cluster-api/exp/topology/desiredstate"
)

// clusterAPIPlan is Cluster API v1.14's own topology upgrade plan:
// GetUpgradePlanOneMinor or GetUpgradePlanFromClusterClassVersions, then
// DefaultAndValidateUpgradePlans, as ComputeUpgradePlan calls them.
func clusterAPIPlan(classVersions []string, desired, cp, minWorkers string) ([]string, []string, error) {
	get := desiredstate.GetUpgradePlanOneMinor
	if len(classVersions) > 0 {
		get = desiredstate.GetUpgradePlanFromClusterClassVersions(classVersions)
	}
	cpPlan, workersPlan, err := get(context.Background(), desired, cp, minWorkers)
	if err != nil {
		return nil, nil, err
	}
	workersPlan, err = desiredstate.DefaultAndValidateUpgradePlans(desired, cp, minWorkers, cpPlan, workersPlan)
	return cpPlan, workersPlan, err
}

// TestUpgradePlanIsClusterAPIs holds upgradePlan to Cluster API's own
// functions over every pair of versions from a ClusterClass's list (with
// patch releases, gaps and one minor missing), with and without the list,
// and workers behind, at or between the control plane's versions.
func TestUpgradePlanIsClusterAPIs(t *testing.T) {
	lists := [][]string{
		nil,
		{"v1.31.2", "v1.32.0", "v1.32.4", "v1.33.1", "v1.34.0", "v1.35.4", "v1.36.0", "v1.36.3", "v1.37.2"},
		{"v1.33.1", "v1.35.4", "v1.36.3", "v1.37.2"}, // v1.34 missing: no plan through it
		{"v1.35.4", "v1.36.3", "v1.37.2"},
		// Build metadata, which Cluster API's webhook allows in the list
		// and orders with util/version's WithBuildTags.
		{"v1.32.0", "v1.33.0+vmware.1", "v1.33.0+vmware.2", "v1.34.1+vmware.1", "v1.34.1+vmware.2.1"},
		{"v1.32.0", "v1.33.0+abc", "v1.33.0+def", "v1.34.1"},
	}
	all := []string{"v1.31.2", "v1.32.0", "v1.32.4", "v1.33.0+vmware.1", "v1.33.0+vmware.2", "v1.33.0+abc", "v1.33.0+def", "v1.33.1", "v1.34.0",
		"v1.34.1", "v1.34.1+vmware.1", "v1.34.1+vmware.2.1", "v1.35.4", "v1.36.0", "v1.36.3", "v1.37.2"}
	checked, refused := 0, 0
	for li, list := range lists {
		for _, cp := range all {
			for _, desired := range all {
				for _, workers := range append([]string{""}, all...) {
					if workers != "" && (semverAbove(workers, cp) || semverAbove(workers, desired)) {
						continue // workers are never ahead of the control plane
					}
					if workers != "" && minorOf(cp)-minorOf(workers) > 3 {
						continue // nor more than three minors behind it (the skew policy)
					}
					if semverAbove(cp, desired) {
						continue // Cluster API's webhook refuses a downgrade
					}
					name := fmt.Sprintf("list%d/%s->%s/workers%s", li, cp, desired, workers)
					wantCP, wantW, wantErr := clusterAPIPlan(list, desired, cp, workers)
					gotCP, gotW, gotErr := upgradePlan(list, desired, cp, workers)
					checked++
					if wantErr != nil {
						require.Error(t, gotErr, "%s: Cluster API refuses: %v", name, wantErr)
						refused++
						continue
					}
					require.NoError(t, gotErr, name)
					require.Empty(t, cmp.Diff(wantCP, gotCP, cmpEmpty), "%s: control plane plan", name)
					require.Empty(t, cmp.Diff(wantW, gotW, cmpEmpty), "%s: workers plan", name)
				}
			}
		}
	}
	t.Logf("%d plans compared, %d of them refused by both", checked, refused)
	require.Greater(t, checked, 2000, "enough plans compared")
}

func minorOf(v string) uint { return version.MustParseSemantic(v).Minor() }

// semverAbove: a is above b, build metadata aside.
func semverAbove(a, b string) bool {
	return version.MustParseSemantic(b).LessThan(version.MustParseSemantic(a))
}

// cmpEmpty treats nil and empty plans alike.
var cmpEmpty = cmp.Comparer(func(a, b []string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return cmp.Equal([]string(a), []string(b))
})

// TestUpgradePlanChains: the plans the preview's users meet.
func TestUpgradePlanChains(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		list                 []string
		desired, cp, workers string
		wantCP, wantWorkers  []string
		wantErr              string
	}{
		{name: "one minor", desired: "v1.36.3", cp: "v1.35.4", workers: "v1.35.4", wantCP: []string{"v1.36.3"}, wantWorkers: []string{"v1.36.3"}},
		{name: "two minors without the list", desired: "v1.37.2", cp: "v1.35.4", workers: "v1.35.4", wantErr: "one minor at a time"},
		{name: "two minors: the control plane steps, the workers jump", list: []string{"v1.35.4", "v1.36.3", "v1.37.2"}, desired: "v1.37.2", cp: "v1.35.4", workers: "v1.35.4",
			wantCP: []string{"v1.36.3", "v1.37.2"}, wantWorkers: []string{"v1.37.2"}},
		{name: "four minors: the workers stop once", list: []string{"v1.33.1", "v1.34.0", "v1.35.4", "v1.36.3", "v1.37.2"}, desired: "v1.37.2", cp: "v1.33.1", workers: "v1.33.1",
			wantCP: []string{"v1.34.0", "v1.35.4", "v1.36.3", "v1.37.2"}, wantWorkers: []string{"v1.36.3", "v1.37.2"}},
		{name: "the latest patch of each minor", list: []string{"v1.35.4", "v1.36.0", "v1.36.3", "v1.37.2"}, desired: "v1.37.2", cp: "v1.35.4",
			wantCP: []string{"v1.36.3", "v1.37.2"}},
		{name: "a minor missing from the list", list: []string{"v1.35.4", "v1.37.2"}, desired: "v1.37.2", cp: "v1.35.4", wantErr: "skips a minor"},
		{name: "nothing to do", desired: "v1.36.3", cp: "v1.36.3", workers: "v1.36.3"},
		{name: "workers behind a done control plane", desired: "v1.36.3", cp: "v1.36.3", workers: "v1.35.4", wantWorkers: []string{"v1.36.3"}},
		{name: "not a version", desired: "1.36", cp: "v1.35.4", wantErr: "spec.topology.version"},
		{name: "build metadata: the exact version listed", list: []string{"v1.32.0", "v1.33.0+vmware.1", "v1.33.0+vmware.2"}, desired: "v1.33.0+vmware.2", cp: "v1.32.0",
			wantCP: []string{"v1.33.0+vmware.2"}},
		{name: "build metadata: no step between builds of one version", list: []string{"v1.32.0", "v1.33.0+vmware.1", "v1.33.0+vmware.2"}, desired: "v1.33.0+vmware.2", cp: "v1.33.0+vmware.1",
			wantErr: "does not reach"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cpPlan, workersPlan, err := upgradePlan(tc.list, tc.desired, tc.cp, tc.workers)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(tc.wantCP, cpPlan, cmpEmpty))
			require.Empty(t, cmp.Diff(tc.wantWorkers, workersPlan, cmpEmpty))
		})
	}
}
