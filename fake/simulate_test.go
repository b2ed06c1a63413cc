package fake_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/fake"
	"github.com/upgradekit/upgradekit/strategy"
)

func TestSimulatorRunsAMixedRollout(t *testing.T) {
	ctx := context.Background()
	cl := fake.NewCluster("demo").ControlPlane(3, "v1.30.4").
		MachineDeployment("md-0", 3, "v1.30.4").
		MachineDeployment("md-1", 2, "v1.30.4", fake.WithImage("kindest/node:v1.30.4"))
	var live int
	sim, err := fake.NewSimulator(cl, fake.WithEvents(func(fake.Event) { live++ }))
	require.NoError(t, err)
	r := fake.Rollout{ToVersion: "v1.31.2", Images: map[string]string{"md-1": "kindest/node:v1.31.2"}}

	preview, err := sim.Preview(ctx, r)
	require.NoError(t, err)
	methods := map[string]strategy.Method{}
	for _, pm := range preview.Machines {
		methods[pm.Machine] = pm.Method
	}
	require.Equal(t, strategy.MethodInPlace, methods["demo-control-plane-0"])
	require.Equal(t, strategy.MethodInPlace, methods["demo-md-0-2"])
	require.Equal(t, strategy.MethodReplace, methods["demo-md-1-0"], "a new image cannot be applied in place")

	res, err := sim.Run(ctx, r)
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.Empty(t, res.Failed)
	require.Equal(t, len(res.Events), live, "every event was reported live")
	require.True(t, res.End.After(res.Start))

	var nodes corev1.NodeList
	require.NoError(t, sim.Client().List(ctx, &nodes))
	for _, n := range nodes.Items {
		require.Equal(t, "v1.31.2", n.Status.NodeInfo.KubeletVersion, n.Name)
	}
	// Control plane first, one at a time; kubeadm upgrade apply only once.
	firstWorker := -1
	applies := 0
	for i, e := range res.Events {
		if e.Step == "kubeadm-upgrade" && e.Machine == "demo-control-plane-0" {
			applies++
		}
		if firstWorker < 0 && (e.Machine[:9] == "demo-md-0" || e.Machine[:9] == "demo-md-1") {
			firstWorker = i
		}
	}
	require.Equal(t, 1, applies)
	for _, e := range res.Events[firstWorker:] {
		require.NotContains(t, e.Machine, "control-plane", "no control plane work after workers started")
	}
	require.Equal(t, "v1.31.2", sim.Fleet().ClusterVersion())
}

func TestSimulatorReportsFailures(t *testing.T) {
	ctx := context.Background()
	cl := fake.NewCluster("demo").ControlPlane(1, "v1.30.4").MachineDeployment("md-0", 2, "v1.30.4")
	faults := fake.NewFaults(7).FailStep("demo-md-0-1", "kubeadm-upgrade", 100)
	sim, err := fake.NewSimulator(cl, fake.WithSimFaults(faults))
	require.NoError(t, err)
	res, err := sim.Run(ctx, fake.Rollout{ToVersion: "v1.31.2"})
	require.NoError(t, err)
	require.Equal(t, []string{"demo-md-0-1"}, res.Failed)
	require.Empty(t, res.Violations, "a failed machine is reported as failed, not as unconverged")
}

// TestSimulatorProperty runs randomized clusters and rollouts and checks the
// invariants every time; a failing seed is printed.
func TestSimulatorProperty(t *testing.T) {
	const runs = 120
	for seed := int64(1); seed <= runs; seed++ {
		rng := rand.New(rand.NewSource(seed))
		cl := fake.NewCluster(fmt.Sprintf("c%d", seed)).ControlPlane(1+2*rng.Intn(2), "v1.30.4")
		images := map[string]string{}
		for g := 0; g < 1+rng.Intn(3); g++ {
			name := fmt.Sprintf("md-%d", g)
			cl.MachineDeployment(name, 1+rng.Intn(4), "v1.30.4", fake.WithImage("img-v1"))
			if rng.Intn(3) == 0 {
				images[name] = "img-v2"
			}
		}
		sim, err := fake.NewSimulator(cl)
		require.NoError(t, err, "seed %d", seed)
		res, err := sim.Run(context.Background(), fake.Rollout{ToVersion: "v1.31.2", Images: images})
		require.NoError(t, err, "seed %d", seed)
		require.Empty(t, res.Violations, "seed %d", seed)
		require.Empty(t, res.Failed, "seed %d", seed)
	}
	t.Logf("%d randomized rollouts, all invariants held", runs)
}
