package simulator

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

func TestFailStepKTimes(t *testing.T) {
	tests := []struct {
		name      string
		times     int
		wantState nodeexec.PlanState
		attempts  int
	}{
		{"recovers within the retry budget", 2, nodeexec.PlanStateSucceeded, 3},
		{"exhausts the retry budget", 3, nodeexec.PlanStateFailed, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			faults := NewFaults(7).FailStep("demo-md-0-1", kubeadm.StepKubelet, tt.times)
			_, _, fleet := upgradeFleet(t, WithFaults(faults))
			fleet.Host("demo-control-plane-0").kubeadm.set(to) // as if the control plane were done
			fc := testingclock.NewFakeClock(time.Unix(0, 0))
			stop := DriveClock(fc, 5*time.Second)
			defer stop()

			// The same fault on another node does not fire.
			out, err := runPlan(t, fleet.Host("demo-md-0-0"), kubeadm.RoleWorker, nil, nodeexec.RunnerOptions{Clock: fc})
			require.NoError(t, err)
			require.Empty(t, faults.Injected())

			out, _ = runPlan(t, fleet.Host("demo-md-0-1"), kubeadm.RoleWorker, nil, nodeexec.RunnerOptions{Clock: fc})
			require.Equal(t, tt.wantState, out.State)
			for _, s := range out.Steps {
				if s.Name == kubeadm.StepKubelet {
					require.Equal(t, tt.attempts, s.Attempts)
				}
			}
			want := make([]Injection, tt.times)
			for i := range want {
				want[i] = Injection{Node: "demo-md-0-1", Step: kubeadm.StepKubelet, What: "fail"}
			}
			require.Empty(t, cmp.Diff(want, faults.Injected()))
		})
	}
}

// TestHealClearsFailuresLeft: once healed, a step that would have failed
// runs; nothing more is injected.
func TestHealClearsFailuresLeft(t *testing.T) {
	faults := NewFaults(7).FailStep("demo-md-0-1", kubeadm.StepKubelet, 100)
	_, _, fleet := upgradeFleet(t, WithFaults(faults))
	fleet.Host("demo-control-plane-0").kubeadm.set(to)
	fc := testingclock.NewFakeClock(time.Unix(0, 0))
	stop := DriveClock(fc, 5*time.Second)
	defer stop()
	faults.Heal("demo-md-0-1", kubeadm.StepKubelet)
	out, err := runPlan(t, fleet.Host("demo-md-0-1"), kubeadm.RoleWorker, nil, nodeexec.RunnerOptions{Clock: fc})
	require.NoError(t, err)
	require.Equal(t, nodeexec.PlanStateSucceeded, out.State)
	require.Empty(t, faults.Injected())
}

func TestFlakyStepsAreDeterministicBySeed(t *testing.T) {
	run := func(seed uint64) []Injection {
		faults := NewFaults(seed).FlakySteps(0.3)
		h, err := NewHost("n", strategy.RoleWorker, from, WithFaults(faults))
		require.NoError(t, err)
		for i := 0; i < 40; i++ {
			_, err := h.Run(context.Background(), nodeexec.Command{Step: string(rune('a' + i%26)), Phase: nodeexec.PhaseRun, Argv: []string{"systemctl", "daemon-reload"}})
			require.NoError(t, err)
		}
		return faults.Injected()
	}
	a, b, c := run(42), run(42), run(43)
	require.NotEmpty(t, a)
	require.Less(t, len(a), 40)
	require.Empty(t, cmp.Diff(a, b), "same seed, same faults")
	require.NotEmpty(t, cmp.Diff(a, c), "another seed, other faults")
}

func TestNotReadyAfterStep(t *testing.T) {
	faults := NewFaults(1).NotReadyAfter("demo-md-0-0", kubeadm.StepKubeadmUpgrade)
	_, c, fleet := upgradeFleet(t, WithFaults(faults))
	fleet.Host("demo-control-plane-0").kubeadm.set(to)
	h := fleet.Host("demo-md-0-0")
	dir := t.TempDir()
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: h.Node(), Role: kubeadm.RoleWorker, FromVersion: from, ToVersion: to})
	require.NoError(t, err)

	r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: dir, StopAfter: kubeadm.StepKubeadmUpgrade})
	require.NoError(t, err)
	_, err = r.Run(context.Background(), plan)
	require.NoError(t, err)
	_, ready := nodeVersion(t, c, h.Node())
	require.Equal(t, corev1.ConditionFalse, ready)
	require.False(t, h.Ready())
	_, ready = nodeVersion(t, c, "demo-md-0-1")
	require.Equal(t, corev1.ConditionTrue, ready, "other nodes are untouched")

	r, err = nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: dir})
	require.NoError(t, err)
	out, err := r.Run(context.Background(), plan)
	require.NoError(t, err, "%+v", out.Failure)
	v, ready := nodeVersion(t, c, h.Node())
	require.Equal(t, corev1.ConditionTrue, ready, "the restarted kubelet reports Ready again")
	require.Equal(t, to, v)
	require.Equal(t, []Injection{{Node: h.Node(), Step: kubeadm.StepKubeadmUpgrade, What: "not-ready"}}, faults.Injected())
}

func TestSlowStepOnVirtualClock(t *testing.T) {
	tests := []struct {
		name    string
		d       time.Duration
		wantErr bool
	}{
		{"within the 15m deadline", 10 * time.Minute, false},
		{"beyond the 15m deadline", 20 * time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1_700_000_000, 0)
			hostClock := testingclock.NewFakeClock(start)
			faults := NewFaults(1).SlowStep("", kubeadm.StepKubeadmUpgrade, tt.d)
			_, _, fleet := upgradeFleet(t, WithFaults(faults), WithHostClock(hostClock))
			runnerClock := testingclock.NewFakeClock(start)
			stop := DriveClock(runnerClock, 10*time.Second)
			defer stop()

			began := time.Now()
			out, err := runPlan(t, fleet.Host("demo-control-plane-0"), kubeadm.RoleFirstControlPlane, nil, nodeexec.RunnerOptions{Clock: runnerClock})
			require.Less(t, time.Since(began), time.Minute, "virtual time, no sleeping")
			if !tt.wantErr {
				require.NoError(t, err)
				require.Equal(t, tt.d, hostClock.Since(start))
				require.Equal(t, []Injection{{Node: "demo-control-plane-0", Step: kubeadm.StepKubeadmUpgrade, What: "slow"}}, faults.Injected())
				return
			}
			require.ErrorIs(t, err, nodeexec.ErrStepFailed)
			require.Equal(t, kubeadm.StepKubeadmUpgrade, out.Failure.Step)
			require.Contains(t, out.Failure.Error, "deadline of 15m0s exceeded")
			require.Len(t, faults.Injected(), 2, "both attempts hit the deadline")
			// Each attempt consumed exactly its budget of 15m in virtual
			// time, so the run replays to the nanosecond.
			require.Equal(t, 30*time.Minute, hostClock.Since(start))
			require.Equal(t, from, fleet.ClusterVersion(), "the slow upgrade never ran")
		})
	}
}

func TestAPIFaults(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(*Faults)
		call  func(c client.Client) error
		is    func(error) bool
	}{
		{"conflict on node update", func(f *Faults) { f.APIError(verbUpdate, "Node", APIFaultConflict, 1) },
			func(c client.Client) error {
				var n corev1.Node
				if err := c.Get(ctx, client.ObjectKey{Name: "demo-md-0-0"}, &n); err != nil {
					return err
				}
				n.Spec.Unschedulable = true
				return c.Update(ctx, &n)
			}, apierrors.IsConflict},
		{"timeout on machine get", func(f *Faults) { f.APIError(verbGet, "Machine", APIFaultTimeout, 1) },
			func(c client.Client) error {
				return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo-md-0-0"}, &clusterv1.Machine{})
			}, apierrors.IsTimeout},
		{"throttled pod list", func(f *Faults) { f.APIError(verbList, "Pod", APIFaultThrottled, 1) },
			func(c client.Client) error { return c.List(ctx, &corev1.PodList{}) }, apierrors.IsTooManyRequests},
		{"conflict on node status update", func(f *Faults) { f.APIError(verbUpdateStatus, "", APIFaultConflict, 1) },
			func(c client.Client) error {
				var n corev1.Node
				if err := c.Get(ctx, client.ObjectKey{Name: "demo-md-0-0"}, &n); err != nil {
					return err
				}
				return c.Status().Update(ctx, &n)
			}, apierrors.IsConflict},
		{"throttled eviction", func(f *Faults) { f.APIError(verbCreateEviction, "Pod", APIFaultThrottled, 1) },
			func(c client.Client) error {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"}}
				return c.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{})
			}, apierrors.IsTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFaults(1)
			tt.setup(f)
			c, err := NewCluster("demo").MachineDeployment("md-0", 1, from).Pod("web-0", "demo-md-0-0", nil).
				Client(WithInterceptor(f.Interceptor()))
			require.NoError(t, err)
			err = tt.call(c)
			require.Error(t, err)
			require.True(t, tt.is(err), "%v", err)
			require.NoError(t, tt.call(c), "the fault fires only once")
			require.Len(t, f.Injected(), 1)
		})
	}
}

func TestAPIFaultsDoNotMatchOtherKinds(t *testing.T) {
	f := NewFaults(1).APIError(verbGet, "Machine", APIFaultTimeout, 5)
	c, err := NewCluster("demo").MachineDeployment("md-0", 1, from).Client(WithInterceptor(f.Interceptor()))
	require.NoError(t, err)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "demo-md-0-0"}, &corev1.Node{}))
	require.Empty(t, f.Injected())
}

func TestHostSurvivesNodeStatusConflicts(t *testing.T) {
	f := NewFaults(1).APIError(verbUpdateStatus, "Node", APIFaultConflict, 2)
	cl := NewCluster("demo").MachineDeployment("md-0", 1, from)
	c, err := cl.Client(WithInterceptor(f.Interceptor()))
	require.NoError(t, err)
	h, err := NewHost("demo-md-0-0", strategy.RoleWorker, from, WithNodeClient(c))
	require.NoError(t, err)
	h.WriteFile("/usr/bin/kubelet", binary(ComponentKubelet, to))
	res, err := h.Run(context.Background(), nodeexec.Command{Argv: []string{"systemctl", "restart", "kubelet"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Output)
	v, _ := nodeVersion(t, c, "demo-md-0-0")
	require.Equal(t, to, v)
	require.Len(t, f.Injected(), 2)
}

func TestHostReportsPersistentAPIFailure(t *testing.T) {
	f := NewFaults(1).APIError(verbGet, "Node", APIFaultTimeout, 100)
	c, err := NewCluster("demo").MachineDeployment("md-0", 1, from).Client(WithInterceptor(f.Interceptor()))
	require.NoError(t, err)
	h, err := NewHost("demo-md-0-0", strategy.RoleWorker, from, WithNodeClient(c))
	require.NoError(t, err)
	res, err := h.Run(context.Background(), nodeexec.Command{Argv: []string{"systemctl", "restart", "kubelet"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.ExitCode)
	require.Contains(t, string(res.Output), "could not update its Node")
}

func TestFlakyAPIDeterministicBySeed(t *testing.T) {
	run := func(seed uint64) []bool {
		f := NewFaults(seed).FlakyAPI(verbGet, "", APIFaultThrottled, 0.5)
		c, err := NewCluster("demo").MachineDeployment("md-0", 1, from).Client(WithInterceptor(f.Interceptor()))
		require.NoError(t, err)
		var out []bool
		for i := 0; i < 32; i++ {
			err := c.Get(context.Background(), client.ObjectKey{Name: "demo-md-0-0"}, &corev1.Node{})
			out = append(out, apierrors.IsTooManyRequests(err))
		}
		return out
	}
	require.Equal(t, run(3), run(3))
	require.NotEqual(t, run(3), run(4))
	require.Contains(t, run(3), true)
	require.Contains(t, run(3), false)
}

func TestNotReadyAfterStepOnEveryNode(t *testing.T) {
	faults := NewFaults(1).NotReadyAfter("", "s")
	_, c, fleet := upgradeFleet(t, WithFaults(faults))
	for _, name := range []string{"demo-md-0-0", "demo-md-0-1"} {
		for i := 0; i < 2; i++ {
			res, err := fleet.Host(name).Run(context.Background(), nodeexec.Command{Step: "s", Phase: nodeexec.PhaseRun, Argv: []string{"systemctl", "daemon-reload"}})
			require.NoError(t, err)
			require.Equal(t, 0, res.ExitCode)
		}
		_, ready := nodeVersion(t, c, name)
		require.Equal(t, corev1.ConditionFalse, ready)
	}
	require.Len(t, faults.Injected(), 2, "once per node")
}

// TestNilAndZeroFaults: a nil *Faults injects nothing and its rule methods
// return a usable Faults; a zero Faults works like NewFaults(0). Neither
// panics.
func TestNilAndZeroFaults(t *testing.T) {
	var none *Faults
	require.Nil(t, none.Injected())
	require.False(t, none.TakeCrash("n", "s", CrashPointDuring))
	require.False(t, none.TakeControllerCrash(1))

	// A host given a nil *Faults runs unchanged.
	_, _, fleet := upgradeFleet(t, WithFaults(none))
	fleet.Host("demo-control-plane-0").kubeadm.set(to)
	fc := testingclock.NewFakeClock(time.Unix(0, 0))
	stop := DriveClock(fc, 5*time.Second)
	defer stop()
	out, err := runPlan(t, fleet.Host("demo-md-0-0"), kubeadm.RoleWorker, nil, nodeexec.RunnerOptions{Clock: fc})
	require.NoError(t, err)
	require.Equal(t, nodeexec.PlanStateSucceeded, out.State)

	// Rules built on nil and on a zero value fire.
	for name, f := range map[string]*Faults{
		"nil":  none.FailStep("demo-md-0-0", kubeadm.StepKubelet, 3),
		"zero": (&Faults{}).FailStep("demo-md-0-0", kubeadm.StepKubelet, 3).FlakySteps(0).SlowStep("x", "y", 0).APIError(verbGet, "", APIFaultConflict, 0),
	} {
		t.Run(name, func(t *testing.T) {
			require.NotNil(t, f)
			_, _, fleet := upgradeFleet(t, WithFaults(f))
			fleet.Host("demo-control-plane-0").kubeadm.set(to)
			out, _ := runPlan(t, fleet.Host("demo-md-0-0"), kubeadm.RoleWorker, nil, nodeexec.RunnerOptions{Clock: fc})
			require.Equal(t, nodeexec.PlanStateFailed, out.State)
			require.Len(t, f.Injected(), 3)
		})
	}
}

// TestNilClusterIsAnError: hosts, objects and simulators of a nil
// *Cluster are ErrInvalidCluster, not a panic.
func TestNilClusterIsAnError(t *testing.T) {
	var cl *Cluster
	_, err := NewSimulator(cl, Options{})
	require.ErrorIs(t, err, ErrInvalidCluster)
	_, err = NewFleet(cl)
	require.ErrorIs(t, err, ErrInvalidCluster)
	_, err = cl.Objects()
	require.ErrorIs(t, err, ErrInvalidCluster)
	_, err = cl.Client()
	require.ErrorIs(t, err, ErrInvalidCluster)
	require.ErrorIs(t, cl.Apply(t.Context(), nil), ErrInvalidCluster)
}
