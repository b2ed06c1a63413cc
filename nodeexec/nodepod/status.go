package nodepod

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// Phase is the state of one step, or of the whole pod.
type Phase string

// Phases.
const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
)

// StepStatus is one step's condition as read from the pod.
type StepStatus struct {
	Name  string
	Phase Phase
	// ExitCode is the exit code of the container's current or, when it is
	// waiting to restart, last termination.
	ExitCode int32
	// Reason and Message come from the container state (for example
	// "CrashLoopBackOff", "Error", "ImagePullBackOff").
	Reason   string
	Message  string
	Restarts int32
}

// Status is the upgrade's state as read from the pod.
type Status struct {
	Phase Phase
	Steps []StepStatus
	// Progress is the fraction of steps that succeeded.
	Progress float64
	// Failed is the first failed step (or auxiliary container, such as
	// the stage container), when Phase is Failed.
	Failed *StepStatus
	// Reason and Message explain a pod-level failure (for example
	// DeadlineExceeded).
	Reason, Message string
}

type readOptions struct {
	crashLoopRestarts int32
	// Per pod, set by ReadStatus: a non-zero exit is final when the pod
	// has failed or never restarts its containers.
	podFailed, restartNever bool
}

// ReadOption configures ReadStatus.
type ReadOption func(*readOptions)

// WithCrashLoopRestarts sets how many restarts with a non-zero exit make a
// waiting container a failure (default 3). One restart is not yet a loop:
// the journaled runner restarts after a crash to resume, by design.
func WithCrashLoopRestarts(n int32) ReadOption {
	return func(o *readOptions) { o.crashLoopRestarts = n }
}

// ReadStatus turns a pod built by Build into per-step conditions. It reads
// LastTerminationState and restart counts, so a container in a crash loop
// is reported as Failed with its exit code, not as "waiting". A single
// non-zero exit is reported as Running (the runner resumes when restarted)
// unless the pod failed, its restartPolicy is Never, or the runner's
// summary in the termination message says the plan ended; then the
// step's own exit code from the summary is reported, not the runner's.
//
// In init-container modes every step has its own container. In
// ModeSingleContainer per-step states come from the runner's summary
// (nodeexec.Summarize) in the container's termination message, current or
// last: it is there once the container has exited at least once (even
// when killed); while the first run is in progress steps show Pending and
// the full detail is in the journal on the host.
//
// A nil pod reads as Pending with Reason "NoPod": there is nothing to
// read yet, which is not a failure of the upgrade.
func ReadStatus(pod *corev1.Pod, opts ...ReadOption) Status {
	if pod == nil {
		return Status{Phase: PhasePending, Reason: "NoPod", Message: "no upgrader pod"}
	}
	o := readOptions{crashLoopRestarts: 3}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	o.podFailed = pod.Status.Phase == corev1.PodFailed
	o.restartNever = pod.Spec.RestartPolicy == corev1.RestartPolicyNever
	var names []string
	if s := pod.Annotations[AnnotationSteps]; s != "" {
		names = strings.Split(s, ",")
	}
	byName := map[string]corev1.ContainerStatus{}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		byName[cs.Name] = cs
	}
	st := Status{Phase: PhasePending}
	single := pod.Annotations[AnnotationMode] == string(ModeSingleContainer)
	main := containerStatus(StatusContainer, byName, o)

	// Auxiliary containers fail the upgrade but are not steps.
	aux := []string{StageContainer}
	for _, n := range names {
		aux = append(aux, backupContainerName(n))
	}
	for _, a := range aux {
		if s := containerStatus(a, byName, o); s.Phase == PhaseFailed && st.Failed == nil {
			st.Failed = &s
		}
	}
	summary := map[string]nodeexec.SummaryStep{}
	var failedStep string // the step the runner's summary blames
	var failedExit int32
	if single {
		if sum, ok := terminationSummary(byName[StatusContainer]); ok {
			for _, s := range sum.Steps {
				summary[s.Name] = s
			}
			if sum.FailedStep != "" && sum.State.Terminal() && sum.State != nodeexec.PlanStateSucceeded {
				failedStep, failedExit = sum.FailedStep, int32(sum.ExitCode)
			}
		}
	}
	done := 0
	for _, n := range names {
		s := containerStatus(n, byName, o)
		if single {
			s = StepStatus{Name: n, Phase: PhasePending}
			if sum, ok := summary[n]; ok {
				s.Phase, s.ExitCode, s.Reason = summaryPhase(sum.State), int32(sum.ExitCode), string(sum.State)
			}
			if main.Phase == PhaseSucceeded {
				s.Phase = PhaseSucceeded
			}
		}
		if s.Phase == PhaseSucceeded {
			done++
		}
		if failedStep != "" && n == failedStep {
			// Rolled-back steps also show Failed; the summary says which
			// step actually failed, and with what exit code.
			s.Phase, s.ExitCode, s.Message = PhaseFailed, failedExit, main.Message
		}
		if s.Phase == PhaseFailed && st.Failed == nil && (failedStep == "" || n == failedStep) {
			f := s
			st.Failed = &f
		}
		st.Steps = append(st.Steps, s)
	}
	if failedStep != "" && st.Failed == nil { // a step not in the annotation
		st.Failed = &StepStatus{Name: failedStep, Phase: PhaseFailed, ExitCode: failedExit, Reason: main.Reason, Message: main.Message}
	}
	if len(names) > 0 {
		st.Progress = float64(done) / float64(len(names))
	}
	if main.Phase == PhaseFailed && st.Failed == nil {
		st.Failed = &main
	}
	switch {
	case st.Failed != nil:
		st.Phase = PhaseFailed
	case pod.Status.Phase == corev1.PodFailed:
		st.Phase, st.Reason, st.Message = PhaseFailed, pod.Status.Reason, pod.Status.Message
		if st.Reason == "" {
			st.Reason = "PodFailed"
		}
	case main.Phase == PhaseSucceeded || pod.Status.Phase == corev1.PodSucceeded:
		st.Phase = PhaseSucceeded
	case pod.Status.Phase == corev1.PodRunning || done > 0 || anyRunning(st.Steps):
		st.Phase = PhaseRunning
	}
	if st.Phase == PhaseFailed && st.Reason == "" && st.Failed != nil {
		st.Reason = st.Failed.Reason
		st.Message = fmt.Sprintf("container %q exited with code %d", st.Failed.Name, st.Failed.ExitCode)
		if st.Failed.Message != "" {
			st.Message += ": " + st.Failed.Message
		}
	}
	return st
}

// terminationSummary parses the runner's summary from the container's
// current or last termination message.
func terminationSummary(cs corev1.ContainerStatus) (nodeexec.Summary, bool) {
	for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
		if t == nil || t.Message == "" {
			continue
		}
		if s, err := nodeexec.ParseSummary([]byte(t.Message)); err == nil {
			return s, true
		}
	}
	return nodeexec.Summary{}, false
}

func summaryPhase(s nodeexec.StepState) Phase {
	switch s {
	case nodeexec.StepStateSucceeded, nodeexec.StepStateSkipped:
		return PhaseSucceeded
	case nodeexec.StepStateRunning, nodeexec.StepStateRollingBack:
		return PhaseRunning
	case nodeexec.StepStateFailed, nodeexec.StepStateRolledBack:
		return PhaseFailed
	}
	return PhasePending
}

func anyRunning(steps []StepStatus) bool {
	for _, s := range steps {
		if s.Phase == PhaseRunning {
			return true
		}
	}
	return false
}

func containerStatus(name string, byName map[string]corev1.ContainerStatus, o readOptions) StepStatus {
	cs, ok := byName[name]
	s := StepStatus{Name: name, Phase: PhasePending}
	if !ok {
		return s
	}
	s.Restarts = cs.RestartCount
	// crashed is the phase of a container that exited non-zero with t.
	// One crash is not a failure: the journaled runner exits when killed
	// mid-step and resumes when the kubelet restarts it. It is final when
	// the runner's summary says the plan ended, when the pod failed or
	// never restarts containers, or after the crash-loop threshold.
	crashed := func(t *corev1.ContainerStateTerminated) Phase {
		s.ExitCode, s.Message = t.ExitCode, t.Message
		terminal := false
		if sum, ok := parseSummary(t.Message); ok {
			terminal = sum.State.Terminal()
			s.ExitCode, s.Message = summaryExit(name, sum, t.ExitCode), summaryMessage(sum)
		}
		if terminal || o.podFailed || o.restartNever || cs.RestartCount >= o.crashLoopRestarts {
			return PhaseFailed
		}
		return PhaseRunning
	}
	last := cs.LastTerminationState.Terminated
	switch {
	case cs.State.Terminated != nil:
		t := cs.State.Terminated
		s.Reason = t.Reason
		if t.ExitCode == 0 {
			s.Phase, s.Message = PhaseSucceeded, t.Message
			if sum, ok := parseSummary(t.Message); ok {
				s.Message = summaryMessage(sum)
			}
		} else {
			s.Phase = crashed(t)
		}
	case cs.State.Running != nil:
		s.Phase = PhaseRunning
		if last != nil {
			s.ExitCode = last.ExitCode // previous crash, now resumed
		}
	case cs.State.Waiting != nil:
		w := cs.State.Waiting
		s.Reason, s.Message = w.Reason, w.Message
		switch {
		case last != nil && last.ExitCode != 0:
			msg := w.Message
			s.Phase = crashed(last)
			if s.Phase == PhaseRunning || s.Message == "" {
				s.Message = msg // restarting to resume: say why it waits
			}
		case isConfigError(w.Reason):
			s.Phase = PhaseFailed
		}
	}
	return s
}

func parseSummary(msg string) (nodeexec.Summary, bool) {
	if msg == "" || msg[0] != '{' {
		return nodeexec.Summary{}, false
	}
	sum, err := nodeexec.ParseSummary([]byte(msg))
	return sum, err == nil
}

// summaryExit is the exit code of the step a runner container reported
// on: the failed step's when the plan failed, else the named step's last
// run; the runner's own exit code (1) says nothing about the step.
func summaryExit(container string, sum nodeexec.Summary, runnerExit int32) int32 {
	if sum.FailedStep != "" {
		return int32(sum.ExitCode)
	}
	for _, st := range sum.Steps {
		if st.Name == container && st.ExitCode != 0 {
			return int32(st.ExitCode)
		}
	}
	return runnerExit
}

// summaryMessage is a readable line instead of the raw summary JSON.
func summaryMessage(sum nodeexec.Summary) string {
	if sum.FailedStep != "" {
		return fmt.Sprintf("plan %s %s: step %q exited with code %d", sum.Plan, sum.State, sum.FailedStep, sum.ExitCode)
	}
	return fmt.Sprintf("plan %s %s", sum.Plan, sum.State)
}

// isConfigError reports waiting reasons that never resolve by waiting.
func isConfigError(reason string) bool {
	switch reason {
	case "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
		return true
	}
	return false
}
