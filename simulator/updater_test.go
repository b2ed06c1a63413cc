package simulator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// kubeletVersions returns every Node's reported kubelet version.
func kubeletVersions(t *testing.T, sim *simulator.Simulator) map[string]string {
	t.Helper()
	var nodes corev1.NodeList
	require.NoError(t, sim.Client().List(context.Background(), &nodes))
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	return out
}

// requireNoStoppedKubelet: every host's kubelet and containerd run.
func requireNoStoppedKubelet(t *testing.T, sim *simulator.Simulator) {
	t.Helper()
	for _, h := range sim.Fleet().Hosts() {
		require.Equal(t, simulator.UnitActive, h.UnitState("kubelet"), "kubelet on %s", h.Node())
		require.Equal(t, simulator.UnitActive, h.UnitState("containerd"), "containerd on %s", h.Node())
	}
}

// requireDoneOnlyVerified: every "done" answer in the timeline is for a
// node whose kubelet runs the rollout's version (the simulator checks
// the host when the answer comes and reports a violation otherwise; this
// checks the end state too).
func requireDoneOnlyVerified(t *testing.T, sim *simulator.Simulator, res *simulator.Result, to string) {
	t.Helper()
	done := 0
	for _, e := range res.Events {
		if e.Step != simulator.UpdateMachineStep+observe.ReasonSucceeded {
			continue
		}
		done++
		require.Equal(t, simulator.AnswerDone, e.Outcome)
		pm, ok := res.Plan.Machine(e.Machine)
		require.True(t, ok, e.Machine)
		require.Equal(t, to, sim.Fleet().Host(pm.Node).RunningVersion(simulator.ComponentKubelet), "done for %s", e.Machine)
	}
	require.Positive(t, done, "the updater answered done at least once")
}

// TestMachineUpdaterModeConvergesLikeTheDefault runs the same rollouts
// with the simulator's own runner and with capi.MachineUpdater driven
// as Cluster API drives it, and compares where they end.
func TestMachineUpdaterModeConvergesLikeTheDefault(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cluster  func() *simulator.Cluster
		to       string
		strategy strategy.Strategy
		// opts are built anew for each mode: faults fire once.
		opts     func() simulator.Options
		restarts int
		replans  int // controller restarts
	}{
		{name: "one control plane, one pool", to: "v1.36.3",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
			}},
		{name: "three control planes, two pools", to: "v1.36.1",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("demo").ControlPlane(3, "v1.35.7").MachineDeployment("md-0", 3, "v1.35.7").MachineDeployment("md-1", 2, "v1.35.7")
			}},
		{name: "raw init-container layout", to: "v1.36.3",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
			},
			opts: func() simulator.Options {
				return simulator.WithUpgraderPodOptions(simulator.Options{}, nodepod.WithImage("r/u:1"), nodepod.WithStageFrom("/staging"))
			}},
		{name: "single-container layout", to: "v1.36.3",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 1, "v1.35.4")
			},
			opts: func() simulator.Options {
				return simulator.WithUpgraderPodOptions(simulator.Options{}, nodepod.WithImage("r/u:1"), nodepod.WithMode(nodepod.ModeSingleContainer), nodepod.WithRunnerCommand("/upgrader", "run"))
			}},
		{name: "runner crash resumed from the journal", to: "v1.36.3",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
			},
			opts: func() simulator.Options {
				return simulator.Options{Faults: simulator.NewFaults(3).CrashRunner("demo-md-0-1", "kubelet", simulator.CrashPointDuring).CrashRunner("demo-md-0-0", "containerd", simulator.CrashPointAfter)}
			},
			restarts: 2},
		{name: "controller crash between batches", to: "v1.36.3",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 3, "v1.35.4")
			},
			opts: func() simulator.Options {
				return simulator.Options{Faults: simulator.NewFaults(9).CrashController(1, 3)}
			},
			replans: 2},
		{name: "API faults and a flaky step", to: "v1.36.3",
			cluster: func() *simulator.Cluster {
				return simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
			},
			opts: func() simulator.Options {
				return simulator.Options{Faults: simulator.NewFaults(5).FailStep("", "kubelet", 1).
					APIError("create", "Pod", simulator.APIFaultTimeout, 2).APIError("update", "Node", simulator.APIFaultConflict, 2).
					FlakyAPI("list", "Pod", simulator.APIFaultThrottled, 0.2)}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := simulator.Rollout{ToVersion: tc.to}
			var want map[string]string
			for _, mode := range []string{"default", "MachineUpdater"} {
				var opts simulator.Options
				if tc.opts != nil {
					opts = tc.opts()
				}
				if mode == "MachineUpdater" {
					opts.MachineUpdater = &capi.UpdaterOptions{}
				}
				sim, err := simulator.NewSimulator(tc.cluster(), opts)
				require.NoError(t, err)
				res, err := sim.Run(ctx, r)
				require.NoError(t, err, mode)
				require.Empty(t, res.Violations, mode)
				require.Empty(t, res.Failed, "%s: %v", mode, res.Reasons)
				require.Empty(t, res.LeftCordoned, mode)
				require.Equal(t, tc.restarts, res.Restarts, mode)
				require.Equal(t, tc.replans, res.ControllerRestarts, mode)
				if tc.restarts > 0 {
					require.Empty(t, simulator.CheckNoRerun(res), "a step crashed during runs again, nothing else")
				}
				got := kubeletVersions(t, sim)
				for n, v := range got {
					require.Equal(t, tc.to, v, "%s: %s", mode, n)
				}
				requireNoStoppedKubelet(t, sim)
				if mode == "default" {
					want = got
					require.Zero(t, res.UpdateCalls)
					continue
				}
				require.Empty(t, cmp.Diff(want, got), "both modes converge to the same versions")
				requireDoneOnlyVerified(t, sim, res, tc.to)
				require.Equal(t, tc.to, sim.Fleet().ClusterVersion())
				inPlace := 0
				for _, pm := range res.Plan.Machines {
					if pm.Method == strategy.MethodInPlace {
						inPlace++
					}
				}
				require.LessOrEqual(t, res.UpdateCalls, 6*inPlace, "a handful of calls per machine")
				t.Logf("%s: %d machines, %d UpdateMachine calls, %d events, %d host commands, %s of virtual time",
					tc.name, inPlace, res.UpdateCalls, len(res.Events), len(res.Executions), res.End.Sub(res.Start))
			}
		})
	}
}

// TestMachineUpdaterModeStopsOnAFailedStep: a kubelet step that keeps
// failing makes the control plane's plan fail; the hook answers Failure
// (FailureStepFailed), the rollout stops there (the workers are held),
// the reason is in the Result, the node stays cordoned for a person, and
// its kubelet still runs.
func TestMachineUpdaterModeStopsOnAFailedStep(t *testing.T) {
	ctx := context.Background()
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
	faults := simulator.NewFaults(1).FailStep("demo-control-plane-0", "kubelet", 100)
	sim, err := simulator.NewSimulator(cl, simulator.Options{Faults: faults, MachineUpdater: &capi.UpdaterOptions{}})
	require.NoError(t, err)
	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Empty(t, res.Violations)
	require.Equal(t, []string{"demo-control-plane-0"}, res.Failed)
	reason := res.Reasons["demo-control-plane-0"]
	require.True(t, strings.HasPrefix(reason, capi.ErrUpdateFailed.Error()+": "+observe.FailureStepFailed+": "), reason)
	require.Contains(t, reason, "step kubelet failed")
	require.Equal(t, []string{"demo-control-plane-0"}, res.LeftCordoned)
	var held []string
	for _, h := range res.Held {
		held = append(held, h.Machine)
	}
	require.Equal(t, []string{"demo-md-0-0", "demo-md-0-1"}, held, "the rollout stops: workers wait behind the failed control plane")
	for n, v := range kubeletVersions(t, sim) {
		if n == "demo-control-plane-0" {
			continue
		}
		require.Equal(t, "v1.35.4", v, n)
	}
	requireNoStoppedKubelet(t, sim)
	// The hook's last answer, then the stall: Cluster API keeps the
	// machine Updating to the end.
	answer, stall := res.Events[len(res.Events)-2], res.Events[len(res.Events)-1]
	require.Equal(t, simulator.UpdateMachineStep+observe.ReasonFailed, answer.Step)
	require.Equal(t, simulator.AnswerFailure, answer.Outcome)
	require.Equal(t, simulator.Event{Machine: "demo-control-plane-0", Batch: answer.Batch, Method: answer.Method, Step: simulator.StallStep,
		Start: answer.End, End: res.End, Outcome: "Blocked"}, stall)
}

// TestMachineUpdaterModeReportsEndlessWaiting: a machine that takes more
// calls than the budget fails loudly, with a violation.
func TestMachineUpdaterModeReportsEndlessWaiting(t *testing.T) {
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.35.4")
	sim, err := simulator.NewSimulator(cl, simulator.WithUpdateCallBudget(simulator.Options{MachineUpdater: &capi.UpdaterOptions{}}, 1))
	require.NoError(t, err)
	res, err := sim.Run(context.Background(), simulator.Rollout{ToVersion: "v1.36.3"})
	require.NoError(t, err)
	require.Equal(t, []string{"demo-control-plane-0"}, res.Failed)
	require.Contains(t, res.Reasons["demo-control-plane-0"], "endless waiting")
	require.NotEmpty(t, res.Violations)
	require.Contains(t, strings.Join(res.Violations, "\n"), "after 1 UpdateMachine calls (endless waiting)")
}

func TestMachineUpdaterModeRejectsBadOptions(t *testing.T) {
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.35.4")
	_, err := simulator.NewSimulator(cl, simulator.Options{MachineUpdater: &capi.UpdaterOptions{RetryAfter: -time.Second}})
	require.ErrorIs(t, err, capi.ErrInvalidOption)
	_, err = simulator.NewSimulator(cl, simulator.WithUpdateCallBudget(simulator.Options{MachineUpdater: &capi.UpdaterOptions{}}, 0))
	require.ErrorIs(t, err, simulator.ErrInvalidCluster)
	_, err = simulator.NewSimulator(cl, simulator.WithUpgraderPodOptions(simulator.Options{MachineUpdater: &capi.UpdaterOptions{}}))
	require.ErrorIs(t, err, capi.ErrInvalidOption, "a pod without an image is refused at once")
}
