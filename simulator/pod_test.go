package simulator

import (
	"context"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
)

// podLayouts are the two forms of nodepod's default init-container
// layout: raw (EKS Anywhere's, one argv per container) and journaled (the
// runner in every container, up to its step).
var podLayouts = []struct {
	name string
	opts []nodepod.Option
}{
	{"raw", nil},
	{"runner", []nodepod.Option{nodepod.WithRunnerCommand("/upgrader", "run")}},
}

// buildPod builds the upgrader pod for plan in ModeInitContainers, with
// the new binaries staged from the image.
func buildPod(t *testing.T, plan nodeexec.Plan, layout []nodepod.Option) *corev1.Pod {
	t.Helper()
	opts := append([]nodepod.Option{nodepod.WithImage("registry.local/upgrader:v1"), nodepod.WithStageFrom("/upgradekit"),
		nodepod.WithMode(nodepod.ModeInitContainers)}, layout...)
	pod, err := nodepod.Build(plan, opts...)
	require.NoError(t, err)
	return pod
}

func newPodRunner(t *testing.T, h *Host, pod *corev1.Pod, journal string, opts ...PodOption) *PodRunner {
	t.Helper()
	pr, err := NewPodRunner(h, pod, append([]PodOption{WithPodJournalDir(journal), WithPodImageStaging(newBits)}, opts...)...)
	require.NoError(t, err)
	return pr
}

func fakeClock() HostOption {
	return WithHostClock(testingclock.NewFakeClock(time.Unix(1_700_000_000, 0)))
}

// stepOf returns plan's step called name.
func stepOf(t *testing.T, plan nodeexec.Plan, name string) nodeexec.Step {
	t.Helper()
	for _, s := range plan.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("plan has no step %q", name)
	return nodeexec.Step{}
}

// replaceStep swaps plan's step called name for steps.
func replaceStep(t *testing.T, plan nodeexec.Plan, name string, steps ...nodeexec.Step) nodeexec.Plan {
	t.Helper()
	var out []nodeexec.Step
	for _, s := range plan.Steps {
		if s.Name == name {
			out = append(out, steps...)
			continue
		}
		out = append(out, s)
	}
	require.Len(t, out, len(plan.Steps)+len(steps)-1, "plan has no step %q", name)
	plan.Steps = out
	require.NoError(t, plan.Validate())
	return plan
}

// oldKubeletSteps is the kubelet part of the kubeadm library before issue
// 13: stop, install, restart, each its own step and so its own init
// container. The scripts are the library's own (the host knows them).
func oldKubeletSteps(t *testing.T, plan nodeexec.Plan) []nodeexec.Step {
	bin := stepOf(t, plan, kubeadm.StepKubeadmBinary) // the same install and backup scripts
	src := path.Join(kubeadm.DefaultStagingDir, "kubernetes", "kubelet")
	dst := path.Join(kubeadm.DefaultBinDir, "kubelet")
	bak := "/var/lib/upgradekit/backup/old/bin/kubelet"
	return []nodeexec.Step{
		{Name: "kubelet-stop", Argv: []string{"systemctl", "stop", "kubelet"}, Timeout: time.Minute, Idempotent: true, NothingToUndo: true},
		{Name: "kubelet-binary", Argv: nodeexec.ShellArgv(bin.Argv[2], src, dst), Backup: nodeexec.ShellArgv(bin.Backup[2], dst, bak),
			Rollback: nodeexec.ShellArgv(bin.Argv[2], bak, dst), Timeout: time.Minute, Idempotent: true},
		{Name: "kubelet-restart", Argv: []string{"systemctl", "restart", "kubelet"}, Timeout: time.Minute, Idempotent: true, NothingToUndo: true},
	}
}

// oldContainerdSteps stops containerd in a step of its own before
// installing it: the same mistake with the other unit a pod needs.
func oldContainerdSteps(t *testing.T, plan nodeexec.Plan) []nodeexec.Step {
	tree := stepOf(t, plan, kubeadm.StepCNIPlugins) // the plain install-tree script
	return []nodeexec.Step{
		{Name: "containerd-stop", Argv: []string{"systemctl", "stop", "containerd"}, Timeout: time.Minute, Idempotent: true, NothingToUndo: true},
		{Name: "containerd", Argv: nodeexec.ShellArgv(tree.Argv[2], path.Join(kubeadm.DefaultStagingDir, "containerd")), Timeout: time.Minute, Idempotent: true, NothingToUndo: true},
		{Name: "containerd-restart", Argv: []string{"systemctl", "restart", "containerd"}, Timeout: time.Minute, Idempotent: true, NothingToUndo: true},
	}
}

func containerStatus(pod *corev1.Pod, name string) corev1.ContainerStatus {
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if cs.Name == name {
			return cs
		}
	}
	return corev1.ContainerStatus{}
}

// TestOldLayoutGetsStuck is the proof that the simulated kubelet catches
// issue 13: with the kubelet (or containerd) stopped by one init container
// and replaced by the next, nothing starts the next container. The pod is
// stuck with the unit down, and the stop container looks running for ever.
func TestOldLayoutGetsStuck(t *testing.T) {
	tests := []struct {
		name      string
		replace   string
		steps     func(*testing.T, nodeexec.Plan) []nodeexec.Step
		unit      string
		stuckRaw  string // the container that cannot start, raw layout
		stuckRun  string // the same, runner layout
		stopper   string
		component Component
		old       string
	}{
		{"kubelet stopped in its own step", kubeadm.StepKubelet, oldKubeletSteps, "kubelet", "kubelet-binary-backup", "kubelet-binary", "kubelet-stop", ComponentKubelet, from},
		{"containerd stopped in its own step", kubeadm.StepContainerd, oldContainerdSteps, "containerd", "containerd", "containerd", "containerd-stop", ComponentContainerd, DefaultContainerdVersion},
	}
	for _, tt := range tests {
		for _, layout := range podLayouts {
			t.Run(tt.name+"/"+layout.name, func(t *testing.T) {
				h, err := NewHost("cp-0", strategy.RoleControlPlane, from, fakeClock())
				require.NoError(t, err)
				plan, err := kubeadm.NewPlan(kubeadm.Config{Node: "cp-0", Role: kubeadm.RoleFirstControlPlane, FromVersion: from, ToVersion: to})
				require.NoError(t, err)
				plan = replaceStep(t, plan, tt.replace, tt.steps(t, plan)...)
				pr := newPodRunner(t, h, buildPod(t, plan, layout.opts), t.TempDir())

				res, err := pr.Run(context.Background())
				require.NoError(t, err)
				want := tt.stuckRaw
				if layout.name == "runner" {
					want = tt.stuckRun
				}
				require.Equal(t, PodPhaseStuck, res.Phase, "%+v", res)
				require.Equal(t, want, res.Container)
				require.Equal(t, tt.unit+" is inactive", res.Reason)
				require.Equal(t, UnitInactive, h.UnitState(tt.unit))
				require.Equal(t, tt.old, h.Version(tt.component), "the new one never got installed")
				require.Equal(t, tt.stopper, res.Runs[len(res.Runs)-1].Name, "the stop was the last container to run")
				require.Equal(t, 0, res.Runs[len(res.Runs)-1].ExitCode)

				pod := pr.Pod()
				require.NotEqual(t, nodepod.PhaseSucceeded, nodepod.ReadStatus(pod).Phase)
				require.Equal(t, corev1.PodPending, pod.Status.Phase)
				if tt.unit == "kubelet" {
					require.False(t, h.Ready())
					require.False(t, res.Runs[len(res.Runs)-1].Reported, "the kubelet died before it could report the exit")
					require.NotNil(t, containerStatus(pod, tt.stopper).State.Running, "the stop container looks running for ever")
				} else {
					require.NotNil(t, containerStatus(pod, tt.stopper).State.Terminated)
				}

				// Stuck is stuck: nothing happens until someone starts the unit.
				again, err := pr.Run(context.Background())
				require.NoError(t, err)
				require.Equal(t, PodPhaseStuck, again.Phase)
				require.Empty(t, again.Runs)

				// A human starts it on the node: the pod carries on.
				out, err := h.Run(context.Background(), nodeexec.Command{Argv: []string{"systemctl", "start", tt.unit}})
				require.NoError(t, err)
				require.Equal(t, 0, out.ExitCode, string(out.Output))
				res, err = pr.Run(context.Background())
				require.NoError(t, err)
				require.Equal(t, PodPhaseSucceeded, res.Phase, "%+v", res)
				require.Equal(t, to, h.RunningVersion(ComponentKubelet))
				require.Equal(t, nodepod.PhaseSucceeded, nodepod.ReadStatus(pr.Pod()).Phase)
			})
		}
	}
}

// TestKubeadmPlansCompleteInPods runs every kubeadm plan, as nodepod's
// default layout lays it out, under the simulated kubelet: each completes
// with the kubelet and containerd running the new versions.
func TestKubeadmPlansCompleteInPods(t *testing.T) {
	const newContainerd, newCNI = "2.0.5", "v1.7.1"
	for _, versions := range [][2]string{{"v1.30.4", "v1.31.2"}, {"v1.31.4", "v1.32.1"}} {
		for _, skipContainerd := range []bool{false, true} {
			for _, layout := range podLayouts {
				name := fmt.Sprintf("%s-%s/skipContainerd=%t/%s", versions[0], versions[1], skipContainerd, layout.name)
				t.Run(name, func(t *testing.T) {
					from, to := versions[0], versions[1]
					cl := NewCluster("demo").ControlPlane(2, from).MachineDeployment("md-0", 1, from)
					c, err := cl.Client()
					require.NoError(t, err)
					fleet, err := NewFleet(cl, WithNodeClient(c), fakeClock())
					require.NoError(t, err)
					journal := t.TempDir()
					for _, n := range []struct {
						node string
						role kubeadm.Role
					}{
						{"demo-control-plane-0", kubeadm.RoleFirstControlPlane},
						{"demo-control-plane-1", kubeadm.RoleControlPlane},
						{"demo-md-0-0", kubeadm.RoleWorker},
					} {
						h := fleet.Host(n.node)
						plan, err := kubeadm.NewPlan(kubeadm.Config{Node: n.node, Role: n.role, FromVersion: from, ToVersion: to, SkipContainerd: skipContainerd})
						require.NoError(t, err)
						pr, err := NewPodRunner(h, buildPod(t, plan, layout.opts), WithPodJournalDir(journal),
							WithPodImageStaging(Staging{Kubernetes: to, Containerd: newContainerd, CNI: newCNI}))
						require.NoError(t, err)
						res, err := pr.Run(context.Background())
						require.NoError(t, err)
						require.Equal(t, PodPhaseSucceeded, res.Phase, "%s: %+v", n.node, res)
						for _, r := range res.Runs {
							require.Zero(t, r.ExitCode, "%s: %s", n.node, r.Name)
							require.True(t, r.Reported, "%s: %s exited with no kubelet to report it", n.node, r.Name)
						}
						st := nodepod.ReadStatus(pr.Pod())
						require.Equal(t, nodepod.PhaseSucceeded, st.Phase, n.node)
						require.Equal(t, 1.0, st.Progress)

						require.Equal(t, UnitActive, h.UnitState("kubelet"), n.node)
						require.Equal(t, UnitActive, h.UnitState("containerd"), n.node)
						require.True(t, h.Ready(), n.node)
						for _, comp := range []Component{ComponentKubeadm, ComponentKubelet, ComponentKubectl} {
							require.Equal(t, to, h.Version(comp), "%s %s", n.node, comp)
						}
						require.Equal(t, to, h.RunningVersion(ComponentKubelet), n.node)
						wantContainerd := newContainerd
						if skipContainerd {
							wantContainerd = DefaultContainerdVersion
						}
						require.Equal(t, wantContainerd, h.Version(ComponentContainerd), n.node)
						require.Equal(t, wantContainerd, h.RunningVersion(ComponentContainerd), n.node)
						require.Equal(t, newCNI, h.Version(ComponentCNI), n.node)
						if n.role != kubeadm.RoleWorker {
							require.Equal(t, to, h.Version(ComponentControlPlane), n.node)
						}
						v, ready := nodeVersion(t, c, n.node)
						require.Equal(t, to, v)
						require.Equal(t, corev1.ConditionTrue, ready)
					}
				})
			}
		}
	}
}

// TestMergedStepsRollBack: undoing the kubelet step puts the old binary
// back and leaves the kubelet running it; undoing the containerd step does
// the same for containerd. Through the runner alone and through a pod.
func TestMergedStepsRollBack(t *testing.T) {
	newHost := func(t *testing.T, faults *Faults) *Host {
		h, err := NewHost("cp-0", strategy.RoleControlPlane, from, fakeClock(), WithFaults(faults))
		require.NoError(t, err)
		h.Stage(newBits)
		return h
	}
	cfg := kubeadm.Config{Node: "cp-0", Role: kubeadm.RoleFirstControlPlane, FromVersion: from, ToVersion: to, RollbackOnFailure: true}
	checkKubeletRolledBack := func(t *testing.T, h *Host, out nodeexec.Outcome) {
		t.Helper()
		// The plan rollback undoes the kubelet step and stops at kubeadm
		// upgrade, which only a human undoes.
		require.Equal(t, nodeexec.PlanStateNeedsAttention, out.State)
		rec, ok := out.Step(kubeadm.StepKubelet)
		require.True(t, ok)
		require.Equal(t, nodeexec.StepStateRolledBack, rec.State)
		require.Equal(t, from, h.Version(ComponentKubelet), "the old kubelet binary is back")
		require.Equal(t, UnitActive, h.UnitState("kubelet"))
		require.Equal(t, from, h.RunningVersion(ComponentKubelet), "and it is what runs")
		require.Equal(t, UnitActive, h.UnitState("containerd"))
	}

	t.Run("runner", func(t *testing.T) {
		h := newHost(t, NewFaults(1).FailStep("cp-0", kubeadm.StepVerify, 100))
		plan, err := kubeadm.NewPlan(cfg)
		require.NoError(t, err)
		r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir(), Clock: SkipAheadClock{testingclock.NewFakeClock(time.Now())}})
		require.NoError(t, err)
		out, err := r.Run(context.Background(), plan)
		require.Error(t, err)
		checkKubeletRolledBack(t, h, out)
	})

	t.Run("runner pod", func(t *testing.T) {
		h := newHost(t, NewFaults(1).FailStep("cp-0", kubeadm.StepVerify, 100))
		plan, err := kubeadm.NewPlan(cfg)
		require.NoError(t, err)
		journal := t.TempDir()
		pr := newPodRunner(t, h, buildPod(t, plan, podLayouts[1].opts), journal)
		res, err := pr.Run(context.Background())
		require.NoError(t, err)
		require.Equal(t, PodPhaseCrashLoop, res.Phase, "%+v", res)
		require.Equal(t, kubeadm.StepVerify, res.Container)
		require.Equal(t, 6, res.Runs[len(res.Runs)-1].ExitCode, "NeedsAttention")
		st := nodepod.ReadStatus(pr.Pod())
		require.Equal(t, nodepod.PhaseFailed, st.Phase)
		require.Equal(t, kubeadm.StepVerify, st.Failed.Name)
		r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: journal})
		require.NoError(t, err)
		path, err := r.JournalPath(plan.Name)
		require.NoError(t, err)
		j, err := nodeexec.ReadJournal(path)
		require.NoError(t, err)
		checkKubeletRolledBack(t, h, j.Outcome)
	})

	t.Run("containerd step", func(t *testing.T) {
		h := newHost(t, nil)
		plan, err := kubeadm.NewPlan(cfg)
		require.NoError(t, err)
		s := stepOf(t, plan, kubeadm.StepContainerd)
		for _, phase := range []struct {
			p    nodeexec.Phase
			argv []string
			want string
		}{{nodeexec.PhaseBackup, s.Backup, DefaultContainerdVersion}, {nodeexec.PhaseRun, s.Argv, newBits.Containerd}, {nodeexec.PhaseRollback, s.Rollback, DefaultContainerdVersion}} {
			res, err := h.Run(context.Background(), nodeexec.Command{Step: s.Name, Phase: phase.p, Argv: phase.argv})
			require.NoError(t, err)
			require.Equal(t, 0, res.ExitCode, "%s: %s", phase.p, res.Output)
			require.Equal(t, phase.want, h.Version(ComponentContainerd), phase.p)
			require.Equal(t, UnitActive, h.UnitState("containerd"), phase.p)
			require.Equal(t, phase.want, h.RunningVersion(ComponentContainerd), phase.p)
		}
	})
}

// TestPodBrokenKubeletNeverLeavesItDown: a new kubelet that does not start
// fails its step, but the step put the old one back and restarted it, so
// the kubelet keeps starting containers: the runner container is restarted
// and fails again (a crash loop, not a stuck pod), the raw pod fails.
func TestPodBrokenKubeletNeverLeavesItDown(t *testing.T) {
	for _, layout := range podLayouts {
		t.Run(layout.name, func(t *testing.T) {
			h, err := NewHost("cp-0", strategy.RoleControlPlane, from, fakeClock())
			require.NoError(t, err)
			h.Stage(newBits)
			// It reports the right version (the bundle step passes) but
			// exits once started.
			h.WriteFile(path.Join(kubeadm.DefaultStagingDir, "kubernetes", "kubelet"), binary(ComponentKubelet, to)+" "+crashesOnStart)
			plan, err := kubeadm.NewPlan(kubeadm.Config{Node: "cp-0", Role: kubeadm.RoleFirstControlPlane, FromVersion: from, ToVersion: to})
			require.NoError(t, err)
			pod, err := nodepod.Build(plan, append([]nodepod.Option{nodepod.WithImage("registry.local/upgrader:v1")}, layout.opts...)...)
			require.NoError(t, err)
			pr := newPodRunner(t, h, pod, t.TempDir())
			res, err := pr.Run(context.Background())
			require.NoError(t, err)
			want := PodPhaseCrashLoop
			if layout.name == "raw" {
				want = PodPhaseFailed
			}
			require.Equal(t, want, res.Phase, "%+v", res)
			require.Equal(t, kubeadm.StepKubelet, res.Container)
			require.Equal(t, UnitActive, h.UnitState("kubelet"), "the step put the old kubelet back and restarted it")
			require.Equal(t, from, h.Version(ComponentKubelet))
			require.Equal(t, from, h.RunningVersion(ComponentKubelet))
			require.True(t, h.Ready())
			st := nodepod.ReadStatus(pr.Pod())
			require.Equal(t, nodepod.PhaseFailed, st.Phase)
			require.Equal(t, kubeadm.StepKubelet, st.Failed.Name)
		})
	}
}

// TestPodCrashDuringKubeletResumes: a runner container killed right after
// it restarted the kubelet is restarted by the kubelet and resumes from
// the journal; the raw layout, which never restarts, fails instead.
func TestPodCrashDuringKubeletResumes(t *testing.T) {
	for _, layout := range podLayouts {
		t.Run(layout.name, func(t *testing.T) {
			faults := NewFaults(1).CrashRunner("cp-0", kubeadm.StepKubelet, CrashPointDuring)
			h, err := NewHost("cp-0", strategy.RoleControlPlane, from, fakeClock(), WithFaults(faults))
			require.NoError(t, err)
			plan, err := kubeadm.NewPlan(kubeadm.Config{Node: "cp-0", Role: kubeadm.RoleFirstControlPlane, FromVersion: from, ToVersion: to})
			require.NoError(t, err)
			pr := newPodRunner(t, h, buildPod(t, plan, layout.opts), t.TempDir())
			res, err := pr.Run(context.Background())
			require.NoError(t, err)
			require.Equal(t, []Injection{{Node: "cp-0", Step: kubeadm.StepKubelet, What: "crash-during"}}, faults.Injected())
			require.Equal(t, UnitActive, h.UnitState("kubelet"))
			require.Equal(t, to, h.RunningVersion(ComponentKubelet))
			if layout.name == "raw" {
				require.Equal(t, PodPhaseFailed, res.Phase, "%+v", res)
				require.Equal(t, kubeadm.StepKubelet, res.Container)
				require.Equal(t, nodepod.PhaseFailed, nodepod.ReadStatus(pr.Pod()).Phase)
				return
			}
			require.Equal(t, PodPhaseSucceeded, res.Phase, "%+v", res)
			var kubeletRuns []int
			for _, r := range res.Runs {
				if r.Name == kubeadm.StepKubelet {
					kubeletRuns = append(kubeletRuns, r.ExitCode)
				}
			}
			require.Equal(t, []int{137, 0}, kubeletRuns, "killed, then restarted and resumed")
			require.Equal(t, int32(1), containerStatus(pr.Pod(), kubeadm.StepKubelet).RestartCount)
		})
	}
}

func TestNewPodRunnerRejects(t *testing.T) {
	h, err := NewHost("cp-0", strategy.RoleControlPlane, from)
	require.NoError(t, err)
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: "cp-0", Role: kubeadm.RoleFirstControlPlane, FromVersion: from, ToVersion: to})
	require.NoError(t, err)
	runnerPod := buildPod(t, plan, podLayouts[1].opts)
	other := runnerPod.DeepCopy()
	other.Spec.NodeName = "cp-1"
	empty := runnerPod.DeepCopy()
	empty.Spec.Containers = nil
	for name, tc := range map[string]struct {
		h    *Host
		pod  *corev1.Pod
		opts []PodOption
	}{
		"nil host":               {nil, runnerPod, []PodOption{WithPodJournalDir(t.TempDir())}},
		"nil pod":                {h, nil, nil},
		"runner without journal": {h, runnerPod, nil},
		"pod for another node":   {h, other, []PodOption{WithPodJournalDir(t.TempDir())}},
		"no main container":      {h, empty, []PodOption{WithPodJournalDir(t.TempDir())}},
		"negative restarts":      {h, runnerPod, []PodOption{WithPodJournalDir(t.TempDir()), withPodMaxRestarts(-1)}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewPodRunner(tc.h, tc.pod, tc.opts...)
			require.ErrorIs(t, err, ErrInvalidPod)
		})
	}
}
