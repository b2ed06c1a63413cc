package tour_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestOneVersionSpellingEverywhere: a cluster's version as Cluster API
// spells it (spec.version, "v1.31.4") is accepted by every package that
// takes a Kubernetes version (ARCHITECTURE.md, "Shared vocabulary"), and
// each says what it needs of it.
func TestOneVersionSpellingEverywhere(t *testing.T) {
	const from, to = "v1.30.4", "v1.31.4"

	_, err := kubeadm.NewPlan(kubeadm.Config{Node: "n", Role: kubeadm.RoleWorker, FromVersion: from, ToVersion: to})
	require.NoError(t, err, "kubeadm plans")
	require.NoError(t, kubeadm.CheckUpgrade(from, to), "kubeadm feasibility")

	minor, n, err := amiselect.ParseKubernetesVersion(to)
	require.NoError(t, err, "amiselect")
	require.Equal(t, "1.31", minor, "amiselect selects by minor")
	require.Equal(t, 31, n)

	_, err = diff.New(diff.KubeadmControlPlane(to))
	require.NoError(t, err, "diff's KubeadmControlPlane preset")

	require.NoError(t, capi.ImagesByVersion{to: "registry.example/upgrader:" + to}.Validate(), "capi's image per version")

	sim, err := simulator.NewSimulator(simulator.NewCluster("demo").ControlPlane(1, from).MachineDeployment("md-0", 1, from), simulator.Options{})
	require.NoError(t, err)
	cluster, err := sim.Input(context.Background(), simulator.Rollout{ToVersion: to})
	require.NoError(t, err, "fake's rollouts")
	require.Equal(t, to, cluster.TargetVersion, "and the planner's input keeps it as given")

	// Any other spelling goes through strategy.ParseKubernetesVersion, which
	// gives each package its form.
	v, err := strategy.ParseKubernetesVersion("1.31.4")
	require.NoError(t, err)
	exact, err := v.Kubeadm()
	require.NoError(t, err)
	require.NoError(t, kubeadm.CheckUpgrade(from, exact))
	require.NoError(t, capi.ImagesByVersion{exact: "registry.example/upgrader"}.Validate())
	minor, _, err = amiselect.ParseKubernetesVersion(v.Minor())
	require.NoError(t, err)
	require.Equal(t, "1.31", minor)

	// Where a package needs more than the minor, a minor alone is refused
	// with an error naming the field, never misread.
	_, err = kubeadm.NewPlan(kubeadm.Config{Node: "n", Role: kubeadm.RoleWorker, FromVersion: from, ToVersion: "v1.31"})
	require.Error(t, err, "kubeadm plans need the exact binary version")
	require.ErrorIs(t, err, kubeadm.ErrInvalidVersion)
	require.Contains(t, err.Error(), `to "v1.31"`)
}
