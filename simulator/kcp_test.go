package simulator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
)

// TestControlPlanesGoAsKubeadmControlPlaneTakesThem: the simulator's
// control plane machines carry the change KubeadmControlPlane v1.14 makes
// to their KubeadmConfig with the version. Going to v1.31 it turns
// kubeadm's ControlPlaneKubeletLocalMode on, which no kubeadm plan applies
// to a running node, so Cluster API's extension declines and the control
// planes are replaced (the workers still go in place, after them); from
// v1.31 the gate stays, and its removal at v1.36 comes with the version,
// so the control planes go in place.
func TestControlPlanesGoAsKubeadmControlPlaneTakesThem(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		cp       strategy.Method
	}{
		{from: "v1.30.4", to: "v1.31.2", cp: strategy.MethodReplace},
		{from: "v1.33.5", to: "v1.34.2", cp: strategy.MethodInPlace},
		{from: "v1.35.4", to: "v1.36.3", cp: strategy.MethodInPlace},
	} {
		t.Run(tc.from+"->"+tc.to, func(t *testing.T) {
			ctx := context.Background()
			cl := simulator.NewCluster("demo").ControlPlane(3, tc.from).MachineDeployment("md-0", 2, tc.from)
			sim, err := simulator.NewSimulator(cl, simulator.Options{})
			require.NoError(t, err)
			r := simulator.Rollout{ToVersion: tc.to}
			plan, err := sim.Plan(ctx, r)
			require.NoError(t, err)
			for _, pm := range plan.Machines {
				want := strategy.MethodInPlace
				if pm.Role == strategy.RoleControlPlane {
					want = tc.cp
				}
				require.Equal(t, want, pm.Method, "%s: %s", pm.Machine, pm.Reason)
				if pm.Method == strategy.MethodReplace {
					require.Contains(t, pm.Reason, "featureGates.ControlPlaneKubeletLocalMode")
				}
			}

			res, err := sim.Run(ctx, r)
			require.NoError(t, err)
			require.Empty(t, res.Violations)
			require.Empty(t, res.Failed)
			var nodes corev1.NodeList
			require.NoError(t, sim.Client().List(ctx, &nodes))
			require.Len(t, nodes.Items, 5)
			for _, n := range nodes.Items {
				require.Equal(t, tc.to, n.Status.NodeInfo.KubeletVersion, n.Name)
			}
			for _, e := range res.Events {
				if strings.Contains(e.Machine, "control-plane") {
					require.Equal(t, tc.cp, e.Method, "%s %s", e.Machine, e.Step)
				}
			}
		})
	}
}
