package simulator_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
)

// TestFleetBootsNodesOneByOne: an empty fleet takes its kubeadm version
// from its first control plane host (kubeadm init), not from a worker;
// names are unique; a removed node is gone.
func TestFleetBootsNodesOneByOne(t *testing.T) {
	f := simulator.NewEmptyFleet()
	require.Empty(t, f.ClusterVersion())
	w, err := f.Add("w-0", strategy.RoleWorker, "v1.30.4")
	require.NoError(t, err)
	require.Equal(t, "v1.30.4", w.RunningVersion(simulator.ComponentKubelet))
	require.Empty(t, f.ClusterVersion(), "a worker does not init the cluster")
	_, err = f.Add("cp-0", strategy.RoleControlPlane, "v1.31.1")
	require.NoError(t, err)
	require.Equal(t, "v1.31.1", f.ClusterVersion())
	_, err = f.Add("cp-1", strategy.RoleControlPlane, "v1.31.2")
	require.NoError(t, err)
	require.Equal(t, "v1.31.1", f.ClusterVersion(), "a joining control plane does not change it")

	_, err = f.Add("w-0", strategy.RoleWorker, "v1.30.4")
	require.ErrorIs(t, err, simulator.ErrInvalidCluster)
	_, err = f.Add("w-1", strategy.RoleWorker, "1.30")
	require.ErrorIs(t, err, simulator.ErrInvalidCluster)

	require.True(t, f.Remove("w-0"))
	require.False(t, f.Remove("w-0"))
	require.Nil(t, f.Host("w-0"))
	require.Len(t, f.Hosts(), 2)
}
