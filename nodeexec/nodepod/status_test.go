package nodepod

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/nodeexec"
)

func terminated(name string, code int32, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}
}

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func waiting(name, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func crashLoop(name string, code, restarts int32) corev1.ContainerStatus {
	cs := waiting(name, "CrashLoopBackOff")
	cs.RestartCount = restarts
	cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", Message: "kubeadm: preflight failed"}
	return cs
}

func podWith(mode Mode, phase corev1.PodPhase, init []corev1.ContainerStatus, main ...corev1.ContainerStatus) *corev1.Pod {
	p := &corev1.Pod{}
	p.Annotations = map[string]string{AnnotationSteps: "a,b,c", AnnotationMode: string(mode)}
	p.Status.Phase = phase
	p.Status.InitContainerStatuses = init
	p.Status.ContainerStatuses = main
	return p
}

func phases(s Status) []Phase {
	var p []Phase
	for _, st := range s.Steps {
		p = append(p, st.Phase)
	}
	return p
}

func TestReadStatus(t *testing.T) {
	tests := []struct {
		name         string
		pod          *corev1.Pod
		wantPhase    Phase
		wantSteps    []Phase
		wantProgress float64
		wantFailed   string
		wantExit     int32
	}{
		{
			name:      "nothing started",
			pod:       podWith(ModeInitContainers, corev1.PodPending, nil),
			wantPhase: PhasePending, wantSteps: []Phase{PhasePending, PhasePending, PhasePending},
		},
		{
			name:      "second step running",
			pod:       podWith(ModeInitContainers, corev1.PodPending, []corev1.ContainerStatus{terminated("a", 0, "Completed"), running("b"), waiting("c", "PodInitializing")}),
			wantPhase: PhaseRunning, wantSteps: []Phase{PhaseSucceeded, PhaseRunning, PhasePending}, wantProgress: 1.0 / 3,
		},
		{
			name:      "crash loop is a failure with its exit code, not waiting",
			pod:       podWith(ModeInitContainers, corev1.PodPending, []corev1.ContainerStatus{terminated("a", 0, "Completed"), crashLoop("b", 3, 4), waiting("c", "PodInitializing")}),
			wantPhase: PhaseFailed, wantSteps: []Phase{PhaseSucceeded, PhaseFailed, PhasePending}, wantProgress: 1.0 / 3,
			wantFailed: "b", wantExit: 3,
		},
		{
			name:      "one restart after a crash is resuming, not failed",
			pod:       podWith(ModeInitContainers, corev1.PodPending, []corev1.ContainerStatus{terminated("a", 0, "Completed"), crashLoop("b", 137, 1)}),
			wantPhase: PhaseRunning, wantSteps: []Phase{PhaseSucceeded, PhaseRunning, PhasePending}, wantProgress: 1.0 / 3,
		},
		{
			name:      "terminated with non-zero exit (restartPolicy Never)",
			pod:       podWith(ModeInitContainers, corev1.PodFailed, []corev1.ContainerStatus{terminated("a", 2, "Error")}),
			wantPhase: PhaseFailed, wantSteps: []Phase{PhaseFailed, PhasePending, PhasePending},
			wantFailed: "a", wantExit: 2,
		},
		{
			name:      "backup container failure fails the upgrade",
			pod:       podWith(ModeInitContainers, corev1.PodFailed, []corev1.ContainerStatus{terminated("a-backup", 1, "Error")}),
			wantPhase: PhaseFailed, wantSteps: []Phase{PhasePending, PhasePending, PhasePending},
			wantFailed: "a-backup", wantExit: 1,
		},
		{
			name:      "bad image config never resolves",
			pod:       podWith(ModeInitContainers, corev1.PodPending, []corev1.ContainerStatus{waiting("a", "InvalidImageName")}),
			wantPhase: PhaseFailed, wantSteps: []Phase{PhaseFailed, PhasePending, PhasePending}, wantFailed: "a",
		},
		{
			name:      "image pull backoff is still pending",
			pod:       podWith(ModeInitContainers, corev1.PodPending, []corev1.ContainerStatus{waiting("a", "ImagePullBackOff")}),
			wantPhase: PhasePending, wantSteps: []Phase{PhasePending, PhasePending, PhasePending},
		},
		{
			name: "all done",
			pod: podWith(ModeInitContainers, corev1.PodSucceeded,
				[]corev1.ContainerStatus{terminated("a", 0, ""), terminated("b", 0, ""), terminated("c", 0, "")}, terminated(StatusContainer, 0, "")),
			wantPhase: PhaseSucceeded, wantSteps: []Phase{PhaseSucceeded, PhaseSucceeded, PhaseSucceeded}, wantProgress: 1,
		},
		{
			name:      "deadline exceeded",
			pod:       podWith(ModeInitContainers, corev1.PodFailed, []corev1.ContainerStatus{terminated("a", 0, ""), running("b")}),
			wantPhase: PhaseFailed, wantSteps: []Phase{PhaseSucceeded, PhaseRunning, PhasePending}, wantProgress: 1.0 / 3,
		},
		{
			name:      "single container running",
			pod:       podWith(ModeSingleContainer, corev1.PodRunning, nil, running(StatusContainer)),
			wantPhase: PhaseRunning, wantSteps: []Phase{PhasePending, PhasePending, PhasePending},
		},
		{
			name:      "single container crash loop",
			pod:       podWith(ModeSingleContainer, corev1.PodRunning, nil, crashLoop(StatusContainer, 1, 5)),
			wantPhase: PhaseFailed, wantSteps: []Phase{PhasePending, PhasePending, PhasePending}, wantFailed: StatusContainer, wantExit: 1,
		},
		{
			name:      "single container done",
			pod:       podWith(ModeSingleContainer, corev1.PodSucceeded, nil, terminated(StatusContainer, 0, "Completed")),
			wantPhase: PhaseSucceeded, wantSteps: []Phase{PhaseSucceeded, PhaseSucceeded, PhaseSucceeded}, wantProgress: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ReadStatus(tt.pod)
			require.Equal(t, tt.wantPhase, s.Phase)
			require.Equal(t, tt.wantSteps, phases(s))
			require.InDelta(t, tt.wantProgress, s.Progress, 1e-9)
			if tt.wantFailed == "" {
				require.Nil(t, s.Failed)
				return
			}
			require.NotNil(t, s.Failed)
			require.Equal(t, tt.wantFailed, s.Failed.Name)
			require.Equal(t, tt.wantExit, s.Failed.ExitCode)
			require.Contains(t, s.Message, tt.wantFailed)
		})
	}
}

func TestReadStatusSingleContainerSummary(t *testing.T) {
	// The runner was killed mid-step and is restarting: its last summary
	// (the termination message) gives per-step progress.
	cs := crashLoop(StatusContainer, 137, 1)
	cs.LastTerminationState.Terminated.Message = string(nodeexec.Summarize(nodeexec.Outcome{Plan: "p", State: nodeexec.PlanStateRunning, Steps: []nodeexec.StepRecord{
		{Name: "a", State: nodeexec.StepStateSucceeded}, {Name: "b", State: nodeexec.StepStateRunning}, {Name: "c", State: nodeexec.StepStatePending},
	}}))
	s := ReadStatus(podWith(ModeSingleContainer, corev1.PodRunning, nil, cs))
	require.Equal(t, PhaseRunning, s.Phase)
	require.Equal(t, []Phase{PhaseSucceeded, PhaseRunning, PhasePending}, phases(s))
	require.InDelta(t, 1.0/3, s.Progress, 1e-9)

	// A terminal failure reported in the summary names the step.
	fail := terminated(StatusContainer, 1, "Error")
	fail.State.Terminated.Message = string(nodeexec.Summarize(nodeexec.Outcome{Plan: "p", State: nodeexec.PlanStateFailed,
		Failure: &nodeexec.Failure{Step: "b", ExitCode: 7}, Steps: []nodeexec.StepRecord{
			{Name: "a", State: nodeexec.StepStateSucceeded}, {Name: "b", State: nodeexec.StepStateFailed, ExitCode: 7}, {Name: "c", State: nodeexec.StepStatePending},
		}}))
	s = ReadStatus(podWith(ModeSingleContainer, corev1.PodRunning, nil, fail))
	require.Equal(t, PhaseFailed, s.Phase)
	require.Equal(t, "b", s.Failed.Name)
	require.Equal(t, int32(7), s.Failed.ExitCode)
}

func TestReadStatusCrashLoopThreshold(t *testing.T) {
	pod := podWith(ModeInitContainers, corev1.PodPending, []corev1.ContainerStatus{crashLoop("a", 42, 1)})
	require.Equal(t, PhaseRunning, ReadStatus(pod).Phase)
	s := ReadStatus(pod, WithCrashLoopRestarts(1))
	require.Equal(t, PhaseFailed, s.Phase)
	require.Equal(t, int32(42), s.Failed.ExitCode)
	require.Equal(t, "kubeadm: preflight failed", s.Failed.Message)
	require.Equal(t, int32(1), s.Failed.Restarts)
}

func TestReadStatusSingleCrashIsNotFinal(t *testing.T) {
	// One crash (terminated non-zero, not yet restarted) of a runner
	// whose pod restarts containers is the resume path, not a failure.
	once := podWith(ModeInitContainers, corev1.PodPending, []corev1.ContainerStatus{terminated("a", 0, "Completed"), terminated("b", 137, "Error")})
	once.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	s := ReadStatus(once)
	require.Equal(t, PhaseRunning, s.Phase)
	require.Equal(t, []Phase{PhaseSucceeded, PhaseRunning, PhasePending}, phases(s))
	require.Nil(t, s.Failed)

	never := once.DeepCopy()
	never.Spec.RestartPolicy = corev1.RestartPolicyNever
	require.Equal(t, PhaseFailed, ReadStatus(never).Phase, "restartPolicy Never: the crash is final")

	failed := once.DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	require.Equal(t, PhaseFailed, ReadStatus(failed).Phase, "the pod failed: the crash is final")

	looping := once.DeepCopy()
	looping.Status.InitContainerStatuses[1].RestartCount = 3
	require.Equal(t, PhaseFailed, ReadStatus(looping).Phase, "crash-loop threshold reached")
}

func summaryMsg(state nodeexec.PlanState, failed string, exit int, steps ...nodeexec.StepRecord) string {
	o := nodeexec.Outcome{Plan: "p", State: state, Steps: steps}
	if failed != "" {
		o.Failure = &nodeexec.Failure{Step: failed, ExitCode: exit}
	}
	return string(nodeexec.Summarize(o))
}

func TestReadStatusSingleContainerRollbackNamesFailedStep(t *testing.T) {
	// b failed with exit 7 and the plan was rolled back: a and b both
	// show RolledBack, but the failure is b's, not a's.
	cs := terminated(StatusContainer, 1, "Error")
	cs.State.Terminated.Message = summaryMsg(nodeexec.PlanStateRolledBack, "b", 7,
		nodeexec.StepRecord{Name: "a", State: nodeexec.StepStateRolledBack},
		nodeexec.StepRecord{Name: "b", State: nodeexec.StepStateRolledBack, ExitCode: 7},
		nodeexec.StepRecord{Name: "c", State: nodeexec.StepStatePending})
	pod := podWith(ModeSingleContainer, corev1.PodRunning, nil, cs)
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	s := ReadStatus(pod)
	require.Equal(t, PhaseFailed, s.Phase, "a terminal summary is final at once")
	require.NotNil(t, s.Failed)
	require.Equal(t, "b", s.Failed.Name)
	require.Equal(t, int32(7), s.Failed.ExitCode)
	require.Contains(t, s.Message, `step "b" exited with code 7`)
}

func TestReadStatusJournaledInitContainerUsesSummary(t *testing.T) {
	// Journaled init layout: container b runs the runner up to step b;
	// the runner exits 1 but step b itself exited 5.
	b := terminated("b", 1, "Error")
	b.State.Terminated.Message = summaryMsg(nodeexec.PlanStateFailed, "b", 5,
		nodeexec.StepRecord{Name: "a", State: nodeexec.StepStateSucceeded},
		nodeexec.StepRecord{Name: "b", State: nodeexec.StepStateFailed, ExitCode: 5},
		nodeexec.StepRecord{Name: "c", State: nodeexec.StepStatePending})
	pod := podWith(ModeInitContainers, corev1.PodPending, []corev1.ContainerStatus{terminated("a", 0, "Completed"), b})
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	s := ReadStatus(pod)
	require.Equal(t, PhaseFailed, s.Phase, "the plan ended: no need to wait for a crash loop")
	require.Equal(t, "b", s.Failed.Name)
	require.Equal(t, int32(5), s.Failed.ExitCode)
	require.Equal(t, `plan p Failed: step "b" exited with code 5`, s.Failed.Message)
	require.NotContains(t, s.Message, "{", "no raw JSON")

	// Killed mid-step (plan still Running): resuming, not failed.
	k := terminated("b", 137, "Error")
	k.State.Terminated.Message = summaryMsg(nodeexec.PlanStateRunning, "", 0,
		nodeexec.StepRecord{Name: "a", State: nodeexec.StepStateSucceeded},
		nodeexec.StepRecord{Name: "b", State: nodeexec.StepStateRunning},
		nodeexec.StepRecord{Name: "c", State: nodeexec.StepStatePending})
	pod.Status.InitContainerStatuses[1] = k
	s = ReadStatus(pod)
	require.Equal(t, PhaseRunning, s.Phase)
	require.Equal(t, "plan p Running", s.Steps[1].Message)
}

// TestReadStatusOfNoPod: a nil pod reads as Pending (nothing to read yet),
// not as a panic and not as a failure.
func TestReadStatusOfNoPod(t *testing.T) {
	st := ReadStatus(nil)
	require.Equal(t, PhasePending, st.Phase)
	require.Nil(t, st.Failed)
	require.Equal(t, "NoPod", st.Reason)
}
