package simulator_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
)

var t0 = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

func TestCheckDisruption(t *testing.T) {
	plan := &strategy.RolloutPlan{Machines: []strategy.PlannedMachine{
		{Machine: "cp-0"}, {Machine: "cp-1"}, {Machine: "w-0", Group: "md-0"}, {Machine: "w-1", Group: "md-0"}, {Machine: "w-2", Group: "md-0"},
	}}
	ev := func(m string, start, end int) simulator.Event {
		return simulator.Event{Machine: m, Step: "s", Start: at(start), End: at(end)}
	}
	tests := []struct {
		name   string
		events []simulator.Event
		limits map[string]int
		want   []string
	}{
		{"one at a time, back to back", []simulator.Event{ev("cp-0", 0, 5), ev("cp-1", 5, 9), ev("w-0", 9, 12), ev("w-1", 12, 15)},
			map[string]int{"": 1, "md-0": 1}, nil},
		{"two control plane machines overlap", []simulator.Event{ev("cp-0", 0, 5), ev("cp-1", 4, 9)},
			map[string]int{"": 1}, []string{"control plane: 2 machines disrupted at once at 2026-01-01T09:04:00Z, limit 1"}},
		{"a machine's span covers all its events", []simulator.Event{ev("w-0", 0, 1), ev("w-1", 2, 3), ev("w-0", 4, 5)},
			map[string]int{"md-0": 1}, []string{"md-0: 2 machines disrupted at once at 2026-01-01T09:02:00Z, limit 1"}},
		{"within a limit of 2", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 0, 5), ev("w-2", 5, 7)},
			map[string]int{"md-0": 2}, nil},
		{"three over a limit of 2", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 0, 5), ev("w-2", 1, 7)},
			map[string]int{"md-0": 2}, []string{"md-0: 3 machines disrupted at once at 2026-01-01T09:01:00Z, limit 2"}},
		{"a group without a limit gets 1", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 1, 5)},
			nil, []string{"md-0: 2 machines disrupted at once at 2026-01-01T09:01:00Z, limit 1"}},
		{"a machine left cordoned stays disrupted to the end", []simulator.Event{ev("w-2", 0, 2), ev("w-0", 3, 5)},
			map[string]int{"md-0": 1}, []string{"md-0: 2 machines disrupted at once at 2026-01-01T09:03:00Z, limit 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := simulator.CheckDisruption(&simulator.Result{Plan: plan, Events: tc.events, Limits: tc.limits, End: at(10), LeftCordoned: []string{"w-2"}})
			require.Empty(t, cmp.Diff(tc.want, got))
		})
	}
	require.Nil(t, simulator.CheckDisruption(nil))
}

func TestCheckNoRerun(t *testing.T) {
	run := func(m, step string, code int, crashed bool) simulator.Execution {
		return simulator.Execution{Machine: m, Step: step, Phase: nodeexec.PhaseRun, ExitCode: code, Crashed: crashed}
	}
	tests := []struct {
		name string
		ex   []simulator.Execution
		want []string
	}{
		{"each step once", []simulator.Execution{run("a", "s1", 0, false), run("a", "s2", 0, false), run("b", "s1", 0, false)}, nil},
		{"retried after failures", []simulator.Execution{run("a", "s1", 1, false), run("a", "s1", 1, false), run("a", "s1", 0, false)}, nil},
		{"re-run after a crash during it", []simulator.Execution{run("a", "s1", 0, true), run("a", "s1", 0, false)}, nil},
		{"checks and rollbacks are not runs", []simulator.Execution{run("a", "s1", 0, false),
			{Machine: "a", Step: "s1", Phase: nodeexec.PhaseCheck}, {Machine: "a", Step: "s1", Phase: nodeexec.PhaseRollback}}, nil},
		{"re-run after it completed", []simulator.Execution{run("a", "s1", 0, false), run("a", "s2", 0, true), run("a", "s1", 0, false)},
			[]string{"a: step s1 ran again after it had completed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Empty(t, cmp.Diff(tc.want, simulator.CheckNoRerun(&simulator.Result{Executions: tc.ex})))
		})
	}
}

func TestCheckCordonsAndSkew(t *testing.T) {
	ctx := context.Background()
	cl := simulator.NewCluster("c").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 4, "v1.35.4")
	c, err := cl.Client()
	require.NoError(t, err)
	update := func(name string, f func(n *corev1.Node)) {
		var n corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
		f(&n)
		require.NoError(t, c.Update(ctx, &n))
	}
	res := &simulator.Result{CordonedBefore: []string{"c-md-0-0", "c-md-0-1"}, LeftCordoned: []string{"c-md-0-3"}}
	update("c-md-0-0", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	update("c-md-0-3", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	require.Empty(t, simulator.CheckCordons(ctx, c, &simulator.Result{CordonedBefore: []string{"c-md-0-0"}, LeftCordoned: []string{"c-md-0-3"}}))

	update("c-md-0-2", func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Annotations = map[string]string{drain.AnnotationCordon: `{"owner":"` + simulator.SimulatorCordonOwner + `"}`}
	})
	require.Empty(t, cmp.Diff([]string{
		"node c-md-0-1 was cordoned by someone else before the rollout and is schedulable now",
		"node c-md-0-2 was left cordoned",
		"node c-md-0-2 still carries the simulator's cordon record",
	}, simulator.CheckCordons(ctx, c, res)))

	require.Empty(t, simulator.CheckSkew(ctx, c, cl))
	var n corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "c-md-0-1"}, &n))
	n.Status.NodeInfo.KubeletVersion = "v1.36.3"
	require.NoError(t, c.Status().Update(ctx, &n))
	require.Equal(t, []string{"at the end: worker c-md-0-1 runs 1.36.3, newer than control plane 1.35.4"}, simulator.CheckSkew(ctx, c, cl))
}

func TestTakeCrash(t *testing.T) {
	f := simulator.NewFaults(1).CrashRunner("n1", "a", simulator.CrashPointDuring).CrashRunner("", "b", simulator.CrashPointAfter)
	require.False(t, f.TakeCrash("n1", "a", simulator.CrashPointAfter), "only the point asked for")
	require.False(t, f.TakeCrash("n2", "a", simulator.CrashPointDuring), "only the node asked for")
	require.True(t, f.TakeCrash("n1", "a", simulator.CrashPointDuring))
	require.False(t, f.TakeCrash("n1", "a", simulator.CrashPointDuring), "once")
	require.True(t, f.TakeCrash("n1", "b", simulator.CrashPointAfter), "node \"\" fires on every node")
	require.True(t, f.TakeCrash("n2", "b", simulator.CrashPointAfter))
	require.False(t, f.TakeCrash("n2", "b", simulator.CrashPointAfter))
	var what []string
	for _, i := range f.Injected() {
		what = append(what, i.String())
	}
	require.Equal(t, []string{"n1/a: crash-during", "n1/b: crash-after", "n2/b: crash-after"}, what)
}

func TestSkipAheadClock(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	c := simulator.SkipAheadClock{FakeClock: fc}
	got := <-c.After(30 * time.Second)
	require.Equal(t, at(0).Add(30*time.Second), got)
	c.Sleep(time.Minute)
	require.Equal(t, at(0).Add(90*time.Second), fc.Now())
	c.Sleep(-time.Second)
	require.Equal(t, at(0).Add(90*time.Second), fc.Now(), "negative waits do not move time back")
	require.Equal(t, at(0).Add(90*time.Second), c.Now())
	require.Equal(t, 90*time.Second, c.Since(at(0)))

	// The zero value, given where a clock.PassiveClock is asked for (a
	// planner's clock, say), reads the zero time rather than panicking.
	var zero simulator.SkipAheadClock
	require.True(t, zero.Now().IsZero())
	require.Zero(t, zero.Since(at(0)))
	require.True(t, (<-zero.After(time.Second)).IsZero())
	zero.Sleep(time.Second)
}

func TestRunnerCrashesAreResumed(t *testing.T) {
	ctx := context.Background()
	cl := simulator.NewCluster("c").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
	faults := simulator.NewFaults(3).
		CrashRunner("c-control-plane-0", "kubectl-binary", simulator.CrashPointDuring).
		CrashRunner("c-md-0-0", "containerd", simulator.CrashPointDuring).
		CrashRunner("c-md-0-1", "kubeadm-binary", simulator.CrashPointAfter)
	sim, err := simulator.NewSimulator(cl, simulator.Options{Faults: faults})
	require.NoError(t, err)
	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.Empty(t, res.Failed)
	require.Equal(t, 3, res.Restarts)
	runs, checks := map[string]int{}, map[string]int{}
	for _, e := range res.Executions {
		switch e.Phase {
		case nodeexec.PhaseRun:
			runs[e.Machine+"/"+e.Step]++
		case nodeexec.PhaseCheck:
			checks[e.Machine+"/"+e.Step]++
		}
	}
	require.Equal(t, 1, runs["c-control-plane-0/kubectl-binary"], "crashed during a checkable step: the check finds it done")
	require.Equal(t, 2, checks["c-control-plane-0/kubectl-binary"], "checked before the first run and after the crash")
	require.Equal(t, 2, runs["c-md-0-0/containerd"], "crashed during an idempotent step without a check: run again")
	require.Equal(t, 1, runs["c-md-0-1/kubeadm-binary"], "crashed after: journaled as done, not run again")
	var crashedBefore []string
	for _, e := range res.Executions {
		if e.Machine == "c-md-0-1" && e.Crashed {
			crashedBefore = append(crashedBefore, e.Step+"/"+string(e.Phase))
		}
	}
	require.Equal(t, []string{"kubeadm-upgrade/backup"}, crashedBefore, "the runner died before the next step's first command")
	require.Equal(t, 1, runs["c-md-0-1/kubeadm-upgrade"], "which the next runner then runs once")
	restarts := 0
	for _, e := range res.Events {
		if e.Step == "runner-restart" {
			restarts++
		}
	}
	require.Equal(t, 3, restarts)

	// Past the restart limit the machine fails, and stays cordoned.
	cl = simulator.NewCluster("d").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 1, "v1.35.4")
	faults = simulator.NewFaults(3)
	for _, s := range []string{"containerd", "cni-plugins", "kubeadm-binary"} {
		faults.CrashRunner("d-md-0-0", s, simulator.CrashPointDuring)
	}
	sim, err = simulator.NewSimulator(cl, simulator.WithMaxRestarts(simulator.Options{Faults: faults}, 2))
	require.NoError(t, err)
	res, err = sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Equal(t, []string{"d-md-0-0"}, res.Failed)
	require.Equal(t, []string{"d-md-0-0"}, res.LeftCordoned)
	require.Empty(t, res.Violations)
	var n corev1.Node
	require.NoError(t, sim.Client().Get(ctx, client.ObjectKey{Name: "d-md-0-0"}, &n))
	require.True(t, n.Spec.Unschedulable)
	require.Contains(t, n.Annotations[drain.AnnotationCordon], simulator.SimulatorCordonOwner)

	_, err = simulator.NewSimulator(cl, simulator.WithMaxRestarts(simulator.Options{}, -1))
	require.ErrorIs(t, err, simulator.ErrInvalidCluster)
}

func TestSimulatorHonoursRolloutLimitsAndCordons(t *testing.T) {
	ctx := context.Background()
	two := intstr.FromInt32(2)
	zero := intstr.FromInt32(0)
	cl := simulator.NewCluster("c").ControlPlane(1, "v1.35.4").
		MachineDeployment("md-0", 5, "v1.35.4", simulator.WithRollingUpdate(&zero, &two))
	sim, err := simulator.NewSimulator(cl, simulator.Options{})
	require.NoError(t, err)
	var md clusterv1.MachineDeployment
	require.NoError(t, sim.Client().Get(ctx, client.ObjectKey{Namespace: cl.Namespace(), Name: "c-md-0"}, &md))
	require.Equal(t, &two, md.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable)

	var n corev1.Node
	require.NoError(t, sim.Client().Get(ctx, client.ObjectKey{Name: "c-md-0-4"}, &n))
	n.Spec.Unschedulable = true // someone else's cordon
	require.NoError(t, sim.Client().Update(ctx, &n))

	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.Equal(t, map[string]int{"": 1, "md-0": 2}, res.Limits)
	require.Equal(t, []string{"c-md-0-4"}, res.CordonedBefore)
	var sizes []int
	for _, b := range res.Plan.Batches {
		sizes = append(sizes, len(b.Machines))
	}
	require.Equal(t, []int{1, 2, 2, 1}, sizes, "maxUnavailable 2: workers two at a time")
	require.NoError(t, sim.Client().Get(ctx, client.ObjectKey{Name: "c-md-0-4"}, &n))
	require.True(t, n.Spec.Unschedulable, "someone else's cordon stays")
	require.NotContains(t, n.Annotations, drain.AnnotationCordon)
	require.NoError(t, sim.Client().Get(ctx, client.ObjectKey{Name: "c-md-0-0"}, &n))
	require.False(t, n.Spec.Unschedulable)
}

func TestWithoutServerSideApply(t *testing.T) {
	ctx := context.Background()
	cl := simulator.NewCluster("c").ControlPlane(1, "v1.35.4")
	c, err := cl.Client(simulator.WithoutServerSideApply())
	require.NoError(t, err)
	var n corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "c-control-plane-0"}, &n))
	n.Status.NodeInfo.KubeletVersion = "v1.36.3"
	require.NoError(t, c.Update(ctx, &n))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "c-control-plane-0"}, &n))
	require.Equal(t, "v1.35.4", n.Status.NodeInfo.KubeletVersion, "status only through the status subresource")
	n.Status.NodeInfo.KubeletVersion = "v1.36.3"
	require.NoError(t, c.Status().Update(ctx, &n))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "c-control-plane-0"}, &n))
	require.Equal(t, "v1.36.3", n.Status.NodeInfo.KubeletVersion)
	require.Empty(t, n.ManagedFields)
}

func TestControllerCrashPlansAgainFromTheCluster(t *testing.T) {
	ctx := context.Background()
	build := func() *simulator.Cluster {
		return simulator.NewCluster("c").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 4, "v1.35.4")
	}
	faults := simulator.NewFaults(1).FailStep("c-md-0-0", "kubeadm-upgrade", 100).CrashController(2)
	sim, err := simulator.NewSimulator(build(), simulator.Options{Faults: faults})
	require.NoError(t, err)
	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.Equal(t, 1, res.ControllerRestarts)
	require.Len(t, res.Plans, 2)
	require.Equal(t, []string{"c-md-0-0"}, res.Failed)
	second := res.Plans[1]
	for name, want := range map[string]strategy.Method{
		"c-control-plane-0": strategy.MethodSkip, // done before the crash: no change
		"c-md-0-0":          strategy.MethodSkip, // failed before the crash: not retried blindly
		"c-md-0-1":          strategy.MethodInPlace,
	} {
		pm, ok := second.Machine(name)
		require.True(t, ok, name)
		require.Equal(t, want, pm.Method, "%s: %s", name, pm.Reason)
	}
	upgrades := 0
	for _, e := range res.Executions {
		if e.Machine == "c-md-0-0" && e.Step == "kubeadm-upgrade" && e.Phase == nodeexec.PhaseRun {
			upgrades++
		}
	}
	require.Equal(t, 2, upgrades, "its two attempts in the first plan, none after")
	var m clusterv1.Machine
	require.NoError(t, sim.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "c-md-0-0"}, &m))
	require.Contains(t, m.Annotations[simulator.FailedAnnotation], "kubeadm-upgrade")
	require.Contains(t, faults.Injected()[len(faults.Injected())-1].String(), "after batch 2: crash-controller")

	// With a circuit breaker at one failure, the new controller stops.
	k, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	p, err := strategy.NewPlanner(strategy.PlannerOptions{Decider: strategy.Updaters(k), Strategy: strategy.NeverReplaceStrategy(), MaxFailures: 1})
	require.NoError(t, err)
	sim, err = simulator.NewSimulator(build(), simulator.Options{Planner: p,
		Faults: simulator.NewFaults(1).FailStep("c-md-0-0", "kubeadm-upgrade", 100).CrashController(2)})
	require.NoError(t, err)
	res, err = sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.True(t, res.Plans[1].CircuitOpen)
	require.Empty(t, res.Plans[1].Batches)
	var n corev1.Node
	require.NoError(t, sim.Client().Get(ctx, client.ObjectKey{Name: "c-md-0-3"}, &n))
	require.Equal(t, "v1.35.4", n.Status.NodeInfo.KubeletVersion, "nothing more was upgraded")
}

// After a failure that leaves a node cordoned, the group's limit is used
// up: the simulator holds the rest of the group instead of disrupting more
// (a reviewer's case: before, the next workers ran and no invariant saw
// the group over its limit). A failed control plane machine holds every
// worker.
// TestFailuresHoldWhatWouldBreakLimits: with FailurePolicyContinue, only a
// machine left cordoned (failed without a rollback) holds its group, and a
// failed control plane machine holds the workers.
func TestFailuresHoldWhatWouldBreakLimits(t *testing.T) {
	ctx := context.Background()
	cl := simulator.NewCluster("c").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 3, "v1.35.4")
	sim, err := simulator.NewSimulator(cl, simulator.Options{OnFailure: simulator.FailurePolicyContinue, Faults: simulator.NewFaults(1).FailStep("c-md-0-0", "kubectl-binary", 100)})
	require.NoError(t, err)
	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.Equal(t, simulator.FailurePolicyContinue, res.OnFailure)
	require.Equal(t, []string{"c-md-0-0"}, res.Failed)
	require.Equal(t, []string{"c-md-0-0"}, res.LeftCordoned, "kubectl-binary fails after kubeadm upgrade: no automatic rollback")
	require.Equal(t, []simulator.Hold{
		{Machine: "c-md-0-1", Reason: "1 machines of the group are left cordoned after failures; the limit is 1"},
		{Machine: "c-md-0-2", Reason: "1 machines of the group are left cordoned after failures; the limit is 1"},
	}, res.Held)
	var n corev1.Node
	require.NoError(t, sim.Client().Get(ctx, client.ObjectKey{Name: "c-md-0-2"}, &n))
	require.Equal(t, "v1.35.4", n.Status.NodeInfo.KubeletVersion)
	require.False(t, n.Spec.Unschedulable)

	cl = simulator.NewCluster("d").ControlPlane(3, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
	sim, err = simulator.NewSimulator(cl, simulator.Options{OnFailure: simulator.FailurePolicyContinue, Faults: simulator.NewFaults(1).FailStep("d-control-plane-1", "containerd", 100)})
	require.NoError(t, err)
	res, err = sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.Equal(t, []string{"d-control-plane-1"}, res.Failed)
	require.Equal(t, []string{"d-md-0-0", "d-md-0-1"}, heldMachines(res), "workers wait for a control plane that did not make it")
	require.NotEmpty(t, simulator.CheckStall(&simulator.Result{Plan: res.Plan, Events: res.Events, Limits: res.Limits, Failed: res.Failed, End: res.End}),
		"d-control-plane-2 went on after d-control-plane-1 failed, which Cluster API does not do")
}

func heldMachines(res *simulator.Result) []string {
	var out []string
	for _, h := range res.Held {
		out = append(out, h.Machine)
	}
	return out
}

// TestFailedMachinesStallAsClusterAPIDoes: by default a failed machine
// stays unavailable, as Cluster API keeps it Updating and retries it: its
// MachineDeployment goes on only while maxSurge+maxUnavailable slots
// remain, and KubeadmControlPlane starts no other control plane machine.
// The same runs with FailurePolicyContinue go on past the failure.
func TestFailedMachinesStallAsClusterAPIDoes(t *testing.T) {
	ctx := context.Background()
	two, zero := intstr.FromInt32(2), intstr.FromInt32(0)
	kcpWaits := "KubeadmControlPlane waits for the in-place update of c-control-plane-1 to complete; it failed, and Cluster API retries it"
	tests := []struct {
		name     string
		cluster  func() *simulator.Cluster
		fail     string // node whose containerd step fails for good (the plan rolls back)
		policy   simulator.FailurePolicy
		held     []simulator.Hold
		upgraded []string // nodes at the new version at the end
	}{
		{
			name: "default limits (maxSurge 1, maxUnavailable 0): the group stops at the failed machine",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("c").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 3, "v1.35.4")
			},
			fail: "c-md-0-0",
			held: []simulator.Hold{
				{Machine: "c-md-0-1", Reason: "1 failed machines of the group stay unavailable while Cluster API retries them; the limit (maxSurge+maxUnavailable) is 1"},
				{Machine: "c-md-0-2", Reason: "1 failed machines of the group stay unavailable while Cluster API retries them; the limit (maxSurge+maxUnavailable) is 1"},
			},
			upgraded: []string{"c-control-plane-0"},
		},
		{
			name: "the same with FailureContinue: the rolled back machine frees its slot",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("c").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 3, "v1.35.4")
			},
			fail:     "c-md-0-0",
			policy:   simulator.FailurePolicyContinue,
			upgraded: []string{"c-control-plane-0", "c-md-0-1", "c-md-0-2"},
		},
		{
			name: "maxUnavailable 2: the others go on in the slot that is left",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("c").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 5, "v1.35.4", simulator.WithRollingUpdate(&zero, &two))
			},
			fail: "c-md-0-0",
			held: []simulator.Hold{
				{Machine: "c-md-0-3", Reason: "1 failed machines of the group stay unavailable while Cluster API retries them; the limit (maxSurge+maxUnavailable) is 2"},
			},
			upgraded: []string{"c-control-plane-0", "c-md-0-1", "c-md-0-2", "c-md-0-4"},
		},
		{
			name: "a failed control plane machine stops KubeadmControlPlane and the workers",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("c").ControlPlane(3, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
			},
			fail: "c-control-plane-1",
			held: []simulator.Hold{
				{Machine: "c-control-plane-2", Reason: kcpWaits},
				{Machine: "c-md-0-0", Reason: "control plane machine c-control-plane-1 failed: workers wait (version skew)"},
				{Machine: "c-md-0-1", Reason: "control plane machine c-control-plane-1 failed: workers wait (version skew)"},
			},
			upgraded: []string{"c-control-plane-0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := tc.cluster()
			opts := simulator.Options{Faults: simulator.NewFaults(1).FailStep(tc.fail, "containerd", 100), OnFailure: tc.policy}
			sim, err := simulator.NewSimulator(cl, opts)
			require.NoError(t, err)
			res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
			require.NoError(t, err)
			require.Empty(t, res.Violations)
			require.Equal(t, []string{tc.fail}, res.Failed)
			require.Empty(t, res.LeftCordoned, "containerd's failure rolls back")
			require.Empty(t, cmp.Diff(tc.held, res.Held))

			var nodes corev1.NodeList
			require.NoError(t, sim.Client().List(ctx, &nodes))
			var upgraded []string
			for _, n := range nodes.Items {
				require.False(t, n.Spec.Unschedulable, n.Name)
				if n.Status.NodeInfo.KubeletVersion == "v1.36.3" {
					upgraded = append(upgraded, n.Name)
				}
			}
			require.ElementsMatch(t, tc.upgraded, upgraded)

			// The stall is on the timeline: the failed machine is Blocked
			// from its failure to the end.
			var stalls []simulator.Event
			for _, e := range res.Events {
				if e.Step == simulator.StallStep {
					stalls = append(stalls, e)
				}
			}
			if tc.policy == simulator.FailurePolicyContinue {
				require.Empty(t, stalls)
				return
			}
			require.Equal(t, simulator.FailurePolicyStall, res.OnFailure)
			require.Len(t, stalls, 1)
			require.Equal(t, tc.fail, stalls[0].Machine)
			require.Equal(t, "Blocked", stalls[0].Outcome)
			require.Equal(t, res.End, stalls[0].End)
			var failedAt time.Time
			for _, e := range res.Events {
				if e.Machine == tc.fail && e.Step != simulator.StallStep && e.End.After(failedAt) {
					failedAt = e.End
				}
			}
			require.Equal(t, failedAt, stalls[0].Start)
		})
	}

	_, err := simulator.NewSimulator(simulator.NewCluster("c").ControlPlane(1, "v1.35.4"), simulator.Options{OnFailure: "retry"})
	require.ErrorIs(t, err, simulator.ErrInvalidCluster)
	require.ErrorContains(t, err, `failure policy "retry"`)
}

func TestCheckStall(t *testing.T) {
	plan := &strategy.RolloutPlan{Machines: []strategy.PlannedMachine{
		{Machine: "cp-0"}, {Machine: "cp-1"}, {Machine: "w-0", Group: "md-0"}, {Machine: "w-1", Group: "md-0"}, {Machine: "w-2", Group: "md-0"},
	}}
	ev := func(m string, start, end int) simulator.Event {
		return simulator.Event{Machine: m, Step: "s", Start: at(start), End: at(end)}
	}
	tests := []struct {
		name   string
		events []simulator.Event
		failed []string
		limit  int
		policy simulator.FailurePolicy
		want   []string
	}{
		{"no failure", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 5, 9)}, nil, 1, "", nil},
		{"a start after a failure that used the only slot", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 5, 9)}, []string{"w-0"}, 1, "",
			[]string{"w-1 started at 2026-01-01T09:05:00Z while 1 failed machines of group md-0 stay unavailable and 0 run; the limit is 1"}},
		{"the same under FailureContinue", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 5, 9)}, []string{"w-0"}, 1, simulator.FailurePolicyContinue, nil},
		{"a slot left after the failure", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 0, 4), ev("w-2", 5, 9)}, []string{"w-0"}, 2, "", nil},
		{"the slot left is taken", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 3, 9), ev("w-2", 6, 9)}, []string{"w-0"}, 2, "",
			[]string{"w-2 started at 2026-01-01T09:06:00Z while 1 failed machines of group md-0 stay unavailable and 1 run; the limit is 2"}},
		{"the failure is not known before it ends", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 0, 5)}, []string{"w-0"}, 2, "", nil},
		{"the stall event does not count as work", []simulator.Event{ev("w-0", 0, 5), ev("w-1", 5, 9),
			{Machine: "w-0", Step: simulator.StallStep, Start: at(5), End: at(10), Outcome: "Blocked"}}, []string{"w-0"}, 2, "", nil},
		{"anything after a control plane failure", []simulator.Event{ev("cp-0", 0, 5), ev("cp-1", 5, 9), ev("w-0", 9, 10)}, []string{"cp-0"}, 1, "", []string{
			"cp-1 started at 2026-01-01T09:05:00Z, after control plane machine cp-0 failed at 2026-01-01T09:05:00Z",
			"w-0 started at 2026-01-01T09:09:00Z, after control plane machine cp-0 failed at 2026-01-01T09:05:00Z",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := simulator.CheckStall(&simulator.Result{Plan: plan, Events: tc.events, Failed: tc.failed, OnFailure: tc.policy,
				Limits: map[string]int{"": 1, "md-0": tc.limit}, End: at(10)})
			require.Empty(t, cmp.Diff(tc.want, got))
		})
	}
	require.Nil(t, simulator.CheckStall(nil))
}
