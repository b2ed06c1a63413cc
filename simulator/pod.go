package simulator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// ErrInvalidPod is wrapped by NewPodRunner's errors: a pod or an option
// the simulated kubelet cannot run.
var ErrInvalidPod = errors.New("invalid upgrader pod for the simulated kubelet")

// PodPhase is where a pod run by a PodRunner stands when Run returns.
type PodPhase string

// Pod phases reported by PodRunner.Run.
const (
	// PodPhaseSucceeded: every init container, then the main container, exited
	// 0. Terminal.
	PodPhaseSucceeded PodPhase = "Succeeded"
	// PodPhaseFailed: a container exited non-zero in a pod whose restartPolicy
	// is Never (the raw init-container layout). Terminal.
	PodPhaseFailed PodPhase = "Failed"
	// PodPhaseCrashLoop: a container of a restartPolicy OnFailure pod exited
	// non-zero and was restarted the maximum number of times
	// (3) without succeeding; a real kubelet would keep
	// restarting it with back-off (CrashLoopBackOff). Run again to
	// restart it more.
	PodPhaseCrashLoop PodPhase = "CrashLoopBackOff"
	// PodPhaseStuck: the next container cannot start because the host's
	// kubelet (which starts containers) or containerd (which runs them)
	// is not active. Nothing on the node will ever start it: a real pod
	// shows its last reported state for ever. Run again after bringing
	// the unit back (as a human on the node would) to continue.
	PodPhaseStuck PodPhase = "Stuck"
)

// ContainerRun is one start of one container of the pod.
type ContainerRun struct {
	// Name of the container; Init tells init containers from the main one.
	Name string
	Init bool
	// Restart is the container's restart count when it started (0 for the
	// first start).
	Restart int32
	// ExitCode is the container's exit code (137 when a simulated crash
	// killed it).
	ExitCode int
	// Output is what the container printed (for runner containers, the
	// upgrader's final lines).
	Output string
	// Reported is false when the kubelet was not running when the
	// container exited: its exit never reached the pod status (which then
	// still shows it running) until the kubelet starts again.
	Reported bool
}

// PodResult is what one PodRunner.Run call did.
type PodResult struct {
	Phase PodPhase
	// Container is the container that could not start (PodPhaseStuck), that
	// failed (PodPhaseFailed) or that crash-loops (PodPhaseCrashLoop).
	Container string
	// Reason explains PodPhaseStuck ("kubelet is inactive") or names the exit
	// code of a failure.
	Reason string
	// Runs lists the container starts of this call, in order.
	Runs []ContainerRun
}

// PodOption configures a PodRunner.
type PodOption func(*PodRunner)

// WithPodJournalDir is the real directory standing for the journal
// directory on the host (the pod's UPGRADEKIT_JOURNAL_DIR, which the
// Runner keeps on a real filesystem). Required for pods built with a
// runner command. Give every PodRunner of one Host the same directory,
// as the host path is shared by its pods.
func WithPodJournalDir(dir string) PodOption { return func(p *PodRunner) { p.journalDir = dir } }

// WithPodImageStaging says what the upgrader image holds in the directory
// the stage container (nodepod.WithStageFrom) copies to the host: the
// stage container writes s into the host, at its destination directory,
// with Host.Stage (s.Dir is ignored). Without it a stage container fails
// as cp would on a missing directory.
func WithPodImageStaging(s Staging) PodOption {
	return func(p *PodRunner) { p.image = &s }
}

// withPodMaxRestarts sets how many times one Run call restarts a failing
// container of a restartPolicy OnFailure pod before reporting
// PodPhaseCrashLoop (default 3).
func withPodMaxRestarts(n int) PodOption { return func(p *PodRunner) { p.maxRestarts = n } }

// PodRunner plays the kubelet of a Host for one upgrader pod built by
// nodepod.Build: it starts the init containers in order, then the main
// container, on the simulated host, and keeps the pod status the kubelet
// would report.
//
// What it models:
//
//   - the kubelet is what starts containers: a container starts only
//     while the Host's kubelet unit is active, and containerd's too (a
//     stopped containerd creates no container). When either is down the
//     pod is stuck: Run returns PodPhaseStuck at once instead of waiting;
//   - a running container is never killed by a kubelet or containerd
//     stop or restart (real kubelets leave running containers alone, and
//     containerd's shims keep them alive): the step's command runs to its
//     end;
//   - the pod status is written by the kubelet: a container that exits
//     while the kubelet is down keeps its last reported state (Running)
//     in Pod() until the kubelet runs again, which is how a pod "looks
//     Running for ever" on a node whose kubelet an upgrade step stopped;
//   - raw containers (no runner command) send their nsenter argv and env
//     to Host.Run, one step phase each ("<step>-backup" containers run
//     the backup phase); restartPolicy Never, so a non-zero exit fails
//     the pod;
//   - runner containers run nodeexec's real journaled Runner with the
//     plan, stop-after step and settings of their environment
//     (nodeexec.FromEnv), the journal in WithPodJournalDir, and exit with
//     the codes of the upgrader binary (examples/upgrader: 0 done or
//     stopped after its step, 4 RolledBack, 5 Failed, 6 NeedsAttention,
//     1 error); their termination message is the runner's summary, as
//     with nodepod's TerminationMessageReadFile, so nodepod.ReadStatus
//     reads Pod() as it reads a real pod. restartPolicy OnFailure: a
//     failed container is restarted and resumes from the journal;
//   - the stage container copies WithPodImageStaging into the host;
//   - Faults.CrashRunner on the Host's faults: CrashPointDuring kills the
//     container right after the step's command succeeded (exit 137, the
//     journal still shows the step running); in runner containers
//     CrashPointAfter kills the next one that runs a command after that step;
//   - a raw status container's default argv ("true") runs on the host;
//   - a pre-pull pod (nodepod.BuildPrePull) runs its command, which
//     exits 0 without touching the host. Whether its image pulls is the
//     caller's to model (Registry.PullPod) before starting it.
//
// What it does not model: the kubelet's restart back-off and
// activeDeadlineSeconds (no time passes between containers), pod
// admission, scheduling, image pulls, volumes other than the journal
// directory, probes, resource limits, evictions and taints, sandbox
// recreation (a reboot or sandbox loss that re-runs every init container
// from the first), several main containers running side by side (they
// run one after the other), InContainer steps (their argv is sent to the
// Host, which knows none), the kubelet restarting a container killed by
// anything other than a simulated crash, and a container being killed by
// a stop of its own cgroup (steps go through systemctl, as the kubeadm
// library's do), and the Node turning NotReady when the kubelet stops
// (no node lifecycle controller runs; Host.Ready says false). The Host
// interprets the kubeadm library's scripts by
// what they are known to do, without executing their text (the scripts
// themselves run for real in nodeexec/kubeadm's tests), so the PodRunner
// proves where a plan puts its container boundaries, not what a script
// says. The pod object is a copy: nothing is written to an API server.
//
// A PodRunner is safe for concurrent use, but Run calls are serialised.
type PodRunner struct {
	mu          sync.Mutex
	host        *Host
	pod         *corev1.Pod
	journalDir  string
	image       *Staging
	maxRestarts int

	containers []corev1.Container // init containers, then main ones
	inits      int
	steps      map[string]bool
	next       int
	restarts   []int32
	lastDone   string // the step whose run last succeeded, for CrashPointAfter
	actual     corev1.PodStatus
	reported   corev1.PodStatus
	final      *PodResult
}

// NewPodRunner returns a simulated kubelet for pod (not modified: the
// runner works on a copy) on host h.
func NewPodRunner(h *Host, pod *corev1.Pod, opts ...PodOption) (*PodRunner, error) {
	bad := func(format string, args ...any) (*PodRunner, error) {
		return nil, fmt.Errorf("simulator: NewPodRunner: %w: %s", ErrInvalidPod, fmt.Sprintf(format, args...))
	}
	if h == nil {
		return bad("host: nil")
	}
	if pod == nil {
		return bad("pod: nil")
	}
	p := &PodRunner{host: h, pod: pod.DeepCopy(), maxRestarts: 3, steps: map[string]bool{}}
	for _, o := range opts {
		if o != nil {
			o(p)
		}
	}
	if p.maxRestarts < 0 {
		return bad("max restarts: %d is negative", p.maxRestarts)
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != h.Node() {
		return bad("spec.nodeName: %s, but the host is %s", errtext.Quote(pod.Spec.NodeName), errtext.Quote(h.Node()))
	}
	if len(pod.Spec.Containers) == 0 {
		return bad("spec.containers: empty")
	}
	if s := pod.Annotations[nodepod.AnnotationSteps]; s != "" {
		for _, n := range strings.Split(s, ",") {
			p.steps[n] = true
		}
	}
	p.containers = append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	p.inits = len(pod.Spec.InitContainers)
	p.restarts = make([]int32, len(p.containers))
	for i, c := range p.containers {
		if len(c.Command) == 0 {
			return bad("container %s: empty command", errtext.Quote(c.Name))
		}
		if envValue(c, nodeexec.EnvPlan) != "" && p.journalDir == "" {
			return bad("container %s runs the journaled runner: WithPodJournalDir is required", errtext.Quote(c.Name))
		}
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
		if i < p.inits {
			p.actual.InitContainerStatuses = append(p.actual.InitContainerStatuses, st)
		} else {
			p.actual.ContainerStatuses = append(p.actual.ContainerStatuses, st)
		}
	}
	p.actual.Phase = corev1.PodPending
	p.reported = *p.actual.DeepCopy()
	return p, nil
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// Pod returns a copy of the pod with the status the kubelet last reported.
func (p *PodRunner) Pod() *corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pod == nil {
		return nil // not made by NewPodRunner
	}
	out := p.pod.DeepCopy()
	out.Status = *p.reported.DeepCopy()
	return out
}

// blocked says why no container can start now, or "".
func (p *PodRunner) blocked() string {
	for _, u := range []string{"kubelet", "containerd"} {
		if st := p.host.UnitState(u); st != UnitActive {
			if st == "" {
				st = "unknown"
			}
			return u + " is " + st
		}
	}
	return ""
}

// sync is the kubelet reporting the pod status, which it can only do
// while it runs.
func (p *PodRunner) sync() bool {
	if p.host.UnitState("kubelet") != UnitActive {
		return false
	}
	p.reported = *p.actual.DeepCopy()
	return true
}

func (p *PodRunner) status(i int) *corev1.ContainerStatus {
	if i < p.inits {
		return &p.actual.InitContainerStatuses[i]
	}
	return &p.actual.ContainerStatuses[i-p.inits]
}

// Run plays the kubelet until the pod succeeds, fails, crash-loops or is
// stuck (see PodPhase), and returns what happened in this call. A pod
// that ended (PodPhaseSucceeded, PodPhaseFailed) returns its final result again;
// after PodPhaseStuck or PodPhaseCrashLoop, Run continues where it stopped. The
// error is non-nil only when ctx ended (the pod is then left as it was).
func (p *PodRunner) Run(ctx context.Context) (PodResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pod == nil || p.host == nil {
		return PodResult{}, fmt.Errorf("simulator: %w: PodRunner not made by NewPodRunner", ErrInvalidPod)
	}
	if p.final != nil {
		return *p.final, nil
	}
	var res PodResult
	p.sync() // a kubelet that came back reports what happened meanwhile
	started := 0
	for p.next < len(p.containers) {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("simulator: pod %s on %s: %w", p.pod.Name, p.host.Node(), err)
		}
		i, c := p.next, p.containers[p.next]
		if why := p.blocked(); why != "" {
			res.Phase, res.Container, res.Reason = PodPhaseStuck, c.Name, why
			return res, nil
		}
		now := metav1.NewTime(p.host.clock.Now())
		st := p.status(i)
		if st.State.Terminated != nil {
			st.LastTerminationState = corev1.ContainerState{Terminated: st.State.Terminated}
		}
		st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		st.RestartCount = p.restarts[i]
		if i >= p.inits {
			p.actual.Phase = corev1.PodRunning
		}
		p.sync()

		code, out, msg := p.exec(ctx, c)
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("simulator: pod %s on %s: container %s: %w", p.pod.Name, p.host.Node(), c.Name, err)
		}
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		if msg == "" && code != 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
			msg = tail(out, 2048)
		}
		st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: int32(code), Reason: reason, Message: msg, StartedAt: now, FinishedAt: metav1.NewTime(p.host.clock.Now()),
		}}
		res.Runs = append(res.Runs, ContainerRun{Name: c.Name, Init: i < p.inits, Restart: p.restarts[i], ExitCode: code, Output: out})
		if code == 0 {
			p.next++
			started = 0
			if p.next == len(p.containers) {
				p.actual.Phase = corev1.PodSucceeded
			}
			res.Runs[len(res.Runs)-1].Reported = p.sync()
			continue
		}
		if p.pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			p.actual.Phase = corev1.PodFailed
			res.Runs[len(res.Runs)-1].Reported = p.sync()
			res.Phase, res.Container, res.Reason = PodPhaseFailed, c.Name, fmt.Sprintf("exit code %d", code)
			p.final = &res
			return res, nil
		}
		if started >= p.maxRestarts {
			st.LastTerminationState = st.State
			st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
			res.Runs[len(res.Runs)-1].Reported = p.sync()
			res.Phase, res.Container, res.Reason = PodPhaseCrashLoop, c.Name, fmt.Sprintf("exit code %d", code)
			p.restarts[i]++
			return res, nil
		}
		res.Runs[len(res.Runs)-1].Reported = p.sync()
		started++
		p.restarts[i]++
	}
	res.Phase = PodPhaseSucceeded
	p.final = &res
	return res, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// exec runs one container to its end and returns its exit code, output
// and termination message.
func (p *PodRunner) exec(ctx context.Context, c corev1.Container) (int, string, string) {
	switch {
	case c.Name == nodepod.PrePullContainer && nodepod.PrePullSelector().Matches(labels.Set(p.pod.Labels)):
		// The pre-pull pod's command (the runner's "version", or
		// "nsenter --version") prints a version and exits 0.
		return 0, strings.Join(c.Command, " ") + ": simulated version", ""
	case c.Name == nodepod.StageContainer:
		return p.stage(c)
	case envValue(c, nodeexec.EnvPlan) != "":
		return p.runner(ctx, c)
	}
	return p.raw(ctx, c)
}

// stage copies the image's staging tree to the host (the container's
// last argument is the destination).
func (p *PodRunner) stage(c corev1.Container) (int, string, string) {
	src, dst := "", c.Command[len(c.Command)-1]
	if len(c.Command) >= 2 {
		src = c.Command[len(c.Command)-2]
	}
	if p.image == nil {
		return 1, fmt.Sprintf("cp: cannot stat '%s/.': No such file or directory", src), ""
	}
	s := *p.image
	s.Dir = dst
	p.host.clearDir(dst) // the stage script empties the directory (a mount point) first
	p.host.Stage(s)
	return 0, "", ""
}

// raw runs a raw container's argv (nsenter and all) on the host.
func (p *PodRunner) raw(ctx context.Context, c corev1.Container) (int, string, string) {
	step, phase := c.Name, nodeexec.PhaseRun
	if !p.steps[c.Name] {
		// "<step>-backup" (maybe hash-shortened) comes right before its step.
		for i, o := range p.containers {
			if o.Name == c.Name && i+1 < len(p.containers) && p.steps[p.containers[i+1].Name] {
				step, phase = p.containers[i+1].Name, nodeexec.PhaseBackup
			}
		}
	}
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	res, err := p.host.Run(ctx, nodeexec.Command{Step: step, Phase: phase, Argv: c.Command, Env: env})
	if err != nil {
		return 137, string(res.Output) + "\n" + err.Error(), ""
	}
	if res.ExitCode == 0 && phase == nodeexec.PhaseRun && p.host.faults != nil && p.host.faults.TakeCrash(p.host.node, step, CrashPointDuring) {
		return 137, string(res.Output) + "\nfake: container killed (injected crash)", ""
	}
	return res.ExitCode, string(res.Output), ""
}

// runner runs the journaled runner with the container's environment, as
// the upgrader binary's "run" command does.
func (p *PodRunner) runner(ctx context.Context, c corev1.Container) (int, string, string) {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	cfg, err := nodeexec.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		return 1, "upgrader run: " + err.Error(), ""
	}
	summary := filepath.Join(p.journalDir, "termination-log."+p.pod.Name+"."+c.Name)
	_ = os.Remove(summary) // a new container has a new termination-log
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	crashed := false
	faults, node := p.host.faults, p.host.node
	exec := nodeexec.ExecutorFunc(func(ctx context.Context, cmd nodeexec.Command) (nodeexec.Result, error) {
		if faults != nil && p.lastDone != "" && cmd.Step != p.lastDone && faults.TakeCrash(node, p.lastDone, CrashPointAfter) {
			crashed = true
			cancel()
			return nodeexec.Result{ExitCode: -1}, errCrashed
		}
		out, err := p.host.Run(ctx, cmd)
		if err == nil && out.ExitCode == 0 && cmd.Phase == nodeexec.PhaseRun {
			p.lastDone = cmd.Step
			if faults != nil && faults.TakeCrash(node, cmd.Step, CrashPointDuring) {
				crashed = true
				cancel()
				return out, errCrashed
			}
		}
		return out, err
	})
	opts := cfg.RunnerOptions()
	opts.JournalDir, opts.SummaryFile = p.journalDir, summary
	if fc, ok := p.host.clock.(*testingclock.FakeClock); ok {
		// retry back-offs cost no wall time
		opts.Clock = SkipAheadClock{fc}
	}
	runner, err := nodeexec.NewRunner(exec, opts)
	if err != nil {
		return 1, "upgrader run: " + err.Error(), ""
	}
	out, err := runner.Run(rctx, cfg.Plan)
	msg, _ := os.ReadFile(summary)
	if crashed {
		return 137, "simulator: container killed (injected crash)", string(msg)
	}
	code := upgraderExitCode(out, err)
	text := fmt.Sprintf("upgrader: plan %s %s", out.Plan, out.State)
	if f := out.Failure; f != nil && out.State != nodeexec.PlanStateSucceeded {
		text += fmt.Sprintf("\nupgrader: failure: step %q (%s) exit code %d after %d attempt(s): %s", f.Step, f.Phase, f.ExitCode, f.Attempts, f.Error)
	}
	if err != nil {
		text += "\nupgrader run: " + err.Error()
	}
	return code, text, string(msg)
}

// upgraderExitCode is the exit code of the upgrader binary's "run"
// (examples/upgrader).
func upgraderExitCode(out nodeexec.Outcome, err error) int {
	var planErr *nodeexec.PlanError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return 3
	case err != nil && !errors.As(err, &planErr):
		return 1
	}
	switch out.State {
	case nodeexec.PlanStateSucceeded, nodeexec.PlanStateRunning: // Running: stopped after its step
		return 0
	case nodeexec.PlanStateRolledBack:
		return 4
	case nodeexec.PlanStateFailed:
		return 5
	case nodeexec.PlanStateNeedsAttention:
		return 6
	}
	return 3
}
