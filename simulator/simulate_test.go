package simulator_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
)

func TestSimulatorRunsAMixedRollout(t *testing.T) {
	ctx := context.Background()
	cl := simulator.NewCluster("demo").ControlPlane(3, "v1.35.4").
		MachineDeployment("md-0", 3, "v1.35.4").
		MachineDeployment("md-1", 2, "v1.35.4", simulator.WithImage("kindest/node:v1.35.4"))
	var live int
	sim, err := simulator.NewSimulator(cl, simulator.Options{OnEvent: func(simulator.Event) { live++ }})
	require.NoError(t, err)
	r := simulator.Rollout{ToVersion: "v1.36.3", Images: map[string]string{"md-1": "kindest/node:v1.36.3"}}

	preview, err := sim.Plan(ctx, r)
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
		require.Equal(t, "v1.36.3", n.Status.NodeInfo.KubeletVersion, n.Name)
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
	require.Equal(t, "v1.36.3", sim.Fleet().ClusterVersion())
}

func TestSimulatorReportsFailures(t *testing.T) {
	ctx := context.Background()
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
	faults := simulator.NewFaults(7).FailStep("demo-md-0-1", "kubeadm-upgrade", 100)
	sim, err := simulator.NewSimulator(cl, simulator.Options{Faults: faults})
	require.NoError(t, err)
	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Equal(t, []string{"demo-md-0-1"}, res.Failed)
	require.Empty(t, res.Violations, "a failed machine is reported as failed, not as unconverged")
}

var (
	simRuns = flag.Int("sim.runs", 1000, "randomized rollouts TestSimulatorProperty runs")
	simSeed = flag.Int64("sim.seed", 0, "run only this seed of TestSimulatorProperty (or: -run TestSimulatorProperty/seeds/seed=N$)")
)

// propertyCase is one randomized rollout: a cluster shape, a change, a
// strategy and faults, all derived from the seed.
type propertyCase struct {
	cluster  *simulator.Cluster
	rollout  simulator.Rollout
	strategy strategy.Strategy
	faults   *simulator.Faults
	// faulted are the nodes with an injected step failure; only they may
	// fail (crashes, conflicts and NotReady blips must be survived).
	faulted map[string]bool
	// cordoned are nodes cordoned by someone else before the rollout.
	cordoned []string
	breaker  *strategy.Breaker
	desc     string
}

// The worker plan's steps, and those with a retry budget (a single
// failure of them must be survived).
var (
	kubeadmSteps = []string{"containerd", "cni-plugins", "kubeadm-binary", "kubeadm-upgrade", "kubectl-binary", "kubelet", "verify"}
	retriedSteps = []string{"containerd", "kubeadm-upgrade", "kubelet", "verify"}
)

func newPropertyCase(t *testing.T, seed int64) propertyCase {
	rng := rand.New(rand.NewSource(seed))
	name := fmt.Sprintf("c%d", seed)
	pc := propertyCase{cluster: simulator.NewCluster(name).ControlPlane(1+2*rng.Intn(2), "v1.35.4"),
		faults: simulator.NewFaults(uint64(seed)), faulted: map[string]bool{}}
	images := map[string]string{}
	intOrPct := func() *intstr.IntOrString {
		switch rng.Intn(4) {
		case 0:
			return nil
		case 1:
			v := intstr.FromString(fmt.Sprintf("%d%%", 25*rng.Intn(5)))
			return &v
		default:
			v := intstr.FromInt32(int32(rng.Intn(3)))
			return &v
		}
	}
	var nodes []string
	for i := range 1 + rng.Intn(3) {
		pool := fmt.Sprintf("md-%d", i)
		surge, unavail := intOrPct(), intOrPct()
		replicas := 1 + rng.Intn(5)
		if _, _, err := (strategy.RollingUpdate{MaxSurge: surge, MaxUnavailable: unavail}).Limits(replicas); err != nil {
			surge = nil // both zero is invalid, as in Kubernetes; nil is CAPI's 1
		}
		pc.cluster.MachineDeployment(pool, replicas, "v1.35.4", simulator.WithImage("img-v1"), simulator.WithRollingUpdate(surge, unavail))
		if rng.Intn(3) == 0 {
			images[pool] = "img-v2"
		}
		for j := range replicas {
			nodes = append(nodes, fmt.Sprintf("%s-%s-%d", name, pool, j))
		}
	}
	pc.rollout = simulator.Rollout{ToVersion: "v1.36.3", Images: images}
	rolling, err := strategy.RollingReplaceStrategy(strategy.RollingUpdate{})
	require.NoError(t, err)
	fallback, err := strategy.FallbackStrategy(rolling)
	require.NoError(t, err)
	strategies := []strategy.Strategy{fallback, rolling, strategy.NeverReplaceStrategy(), strategy.ReplaceFirstStrategy()}
	pc.strategy = strategies[rng.Intn(len(strategies))]

	// Faults on workers (a control plane failure stops every worker
	// behind it, which TestSimulatorReportsFailures covers).
	pick := func() string { return nodes[rng.Intn(len(nodes))] }
	var what []string
	if rng.Intn(4) == 0 {
		n, step := pick(), kubeadmSteps[rng.Intn(len(kubeadmSteps))]
		pc.faults.FailStep(n, step, 100) // beyond every retry budget
		pc.faulted[n] = true
		what = append(what, "fail "+n+"/"+step)
	}
	if rng.Intn(3) == 0 {
		n, step := pick(), retriedSteps[rng.Intn(len(retriedSteps))]
		pc.faults.FailStep(n, step, 1) // within the retry budget
		what = append(what, "flake "+n+"/"+step)
	}
	if rng.Intn(3) == 0 {
		at := []simulator.CrashPoint{simulator.CrashPointDuring, simulator.CrashPointAfter}[rng.Intn(2)]
		step := kubeadmSteps[rng.Intn(len(kubeadmSteps))]
		n := pick()
		if rng.Intn(2) == 0 {
			n = "" // every node
		}
		pc.faults.CrashRunner(n, step, at)
		what = append(what, fmt.Sprintf("crash %s %s/%s", at, n, step))
	}
	if rng.Intn(4) == 0 {
		n := 1 + rng.Intn(4)
		pc.faults.CrashController(n)
		what = append(what, fmt.Sprintf("controller crash after batch %d", n))
	}
	if rng.Intn(4) == 0 {
		pc.faults.NotReadyAfter(pick(), "kubelet")
		what = append(what, "not-ready")
	}
	if rng.Intn(3) == 0 {
		pc.faults.APIError("update", "Node", simulator.APIFaultConflict, 1+rng.Intn(3))
		pc.faults.APIError("update/status", "Node", simulator.APIFaultConflict, 1+rng.Intn(3))
		pc.faults.APIError("update", "Machine", simulator.APIFaultThrottled, 1)
		what = append(what, "api")
	}
	if rng.Intn(4) == 0 {
		pc.cordoned = append(pc.cordoned, pick())
	}
	if rng.Intn(2) == 0 {
		// Machines that go bad after their update, and a breaker per group
		// that must stop the group right above its limit.
		for range 1 + rng.Intn(3) {
			n := pick()
			pc.faults.UnhealthyAfterUpdate(n)
			what = append(what, "unhealthy "+n)
		}
		limits := []intstr.IntOrString{intstr.FromInt32(0), intstr.FromInt32(1), intstr.FromString("34%")}
		pc.breaker = &strategy.Breaker{MaxUnhealthy: limits[rng.Intn(len(limits))]}
		what = append(what, "breaker "+pc.breaker.MaxUnhealthy.String())
	}
	pc.desc = fmt.Sprintf("strategy %s, images %v, faults %v, cordoned %v", pc.strategy.Name(), images, what, pc.cordoned)
	return pc
}

func runPropertyCase(t *testing.T, seed int64) *simulator.Result {
	pc := newPropertyCase(t, seed)
	ctx := context.Background()
	opts := simulator.Options{Strategy: pc.strategy, Faults: pc.faults, Breaker: pc.breaker}
	if seed%4 == 0 {
		// A quarter of the runs carry on past failures; the others stall
		// where Cluster API does (CheckStall), the default. Drawn from the
		// seed, not the generator, so every seed keeps its case.
		opts.OnFailure = simulator.FailurePolicyContinue
	}
	sim, err := simulator.NewSimulator(pc.cluster, opts)
	require.NoError(t, err, "seed %d", seed)
	for _, n := range pc.cordoned {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var node corev1.Node
			if err := sim.Client().Get(ctx, client.ObjectKey{Name: n}, &node); err != nil {
				return err
			}
			node.Spec.Unschedulable = true
			return sim.Client().Update(ctx, &node)
		}))
	}
	res, err := sim.Run(ctx, pc.rollout)
	require.NoError(t, err, "seed %d (%s)", seed, pc.desc)
	require.Empty(t, res.Violations, "seed %d (%s)", seed, pc.desc)
	for _, f := range res.Failed {
		require.True(t, pc.faulted[f], "seed %d (%s): %s failed without an injected failure", seed, pc.desc, f)
	}
	return res
}

// TestSimulatorProperty runs randomized clusters (shapes, rollout limits,
// strategies, image changes) with randomized faults (hard and transient
// step failures, runner crashes during and between steps, NotReady nodes,
// controller crashes that lose the plan, API conflicts and throttling,
// nodes cordoned by someone else), a quarter of them with FailurePolicyContinue
// and the others stalling after failures as Cluster API does, and checks
// every invariant each time (CheckStall among them), plus: only machines with an injected hard
// failure fail, and a seed replays to the same timeline. Each seed is a
// parallel subtest; a failing one replays alone with
// -run 'TestSimulatorProperty/seed=N$'.
func TestSimulatorProperty(t *testing.T) {
	start := time.Now()
	first, last := int64(1), int64(*simRuns)
	if *simSeed != 0 {
		first, last = *simSeed, *simSeed
	}
	var mu sync.Mutex
	var runs, machines, failed, held, restarts, replans, commands, unhealthy, trips int
	t.Run("seeds", func(t *testing.T) {
		for seed := first; seed <= last; seed++ {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				res := runPropertyCase(t, seed)
				if seed%50 == 0 {
					again := runPropertyCase(t, seed)
					require.Equal(t, res.Events, again.Events, "seed %d is not deterministic", seed)
				}
				mu.Lock()
				defer mu.Unlock()
				runs++
				machines += len(res.Plan.Machines)
				failed += len(res.Failed)
				held += len(res.Held)
				restarts += res.Restarts
				replans += res.ControllerRestarts
				commands += len(res.Executions)
				unhealthy += len(res.Unhealthy)
				trips += len(res.Breakers)
			})
		}
	})
	require.Equal(t, int(last-first+1), runs)
	t.Logf("%d randomized rollouts (%d machines, %d failed by injected faults, %d unhealthy after their update, %d circuit breakers tripped, %d held back after failures, %d runner restarts, %d controller restarts, %d host commands), all invariants held (the breakers each at the first machine above their limit, none started after), in %v",
		runs, machines, failed, unhealthy, trips, held, restarts, replans, commands, time.Since(start).Round(time.Millisecond))
}

// TestSimulatorGates: gates are asked before each machine, at the virtual
// time, against the simulated cluster: a maintenance window holds the
// rollout until it opens; a machine that goes bad after its update keeps
// the soak gate closed, so the next machines are held; a Stop holds the
// rest of the group.
func TestSimulatorGates(t *testing.T) {
	ctx := context.Background()
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 3, "v1.35.4")

	window, err := strategy.MaintenanceWindow("nightly", "0 22 * * *", 4*time.Hour, "UTC")
	require.NoError(t, err)
	sim, err := simulator.NewSimulator(cl, simulator.Options{Gates: window, GateMaxWait: 48 * time.Hour})
	require.NoError(t, err)
	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.Empty(t, res.Held)
	opens := time.Date(2026, 1, 1, 22, 0, 0, 0, time.UTC)
	for _, e := range res.Events {
		require.False(t, e.Start.Before(opens), "%s/%s started at %s, before the window", e.Machine, e.Step, e.Start)
	}
	require.Equal(t, 13*time.Hour, res.GateWaits["demo-control-plane-0"], "the simulation starts at 09:00")

	cl = simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 3, "v1.35.4")
	faults := simulator.NewFaults(1).UnhealthyAfterUpdate("demo-md-0-0")
	var sim2 *simulator.Simulator
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return sim2.Client(), nil }
	soak, err := gates.Soak(workload, 5*time.Minute, nil)
	require.NoError(t, err)
	sim2, err = simulator.NewSimulator(cl, simulator.Options{Faults: faults, Gates: soak, GateMaxWait: 30 * time.Minute})
	require.NoError(t, err)
	res, err = sim2.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Equal(t, []string{"demo-md-0-0"}, res.Unhealthy)
	require.Len(t, res.Held, 2, "the other workers wait for demo-md-0-0, which never comes back: %v", res.Held)
	for _, h := range res.Held {
		require.Contains(t, h.Reason, "demo-md-0-0 (not Ready)")
	}

	stop := strategy.GateFunc(func(_ context.Context, req strategy.GateRequest) strategy.GateResult {
		if req.Machine == "demo-md-0-1" {
			return strategy.GateResult{Verdict: strategy.VerdictStop, Gate: "change-freeze", Reason: "release freeze"}
		}
		return strategy.GateResult{Verdict: strategy.VerdictAllow}
	})
	cl = simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 3, "v1.35.4")
	sim, err = simulator.NewSimulator(cl, simulator.Options{Gates: stop, GateMaxWait: time.Hour})
	require.NoError(t, err)
	res, err = sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Equal(t, []simulator.Hold{{Machine: "demo-md-0-1", Reason: "Stop by change-freeze: release freeze"}, {Machine: "demo-md-0-2", Reason: "Stop by change-freeze: release freeze"}}, res.Held)
}
