package simulator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// simulatorUpgraderImage is the upgrader image of the pods the
// Simulator's MachineUpdater mode builds by default. No image is pulled:
// the simulated kubelet (PodRunner) plays its containers.
const simulatorUpgraderImage = "registry.invalid/upgradekit/upgrader:simulated"

// defaultUpdateCallBudget is how many UpdateMachine calls the Simulator
// makes for one machine in MachineUpdater mode before it gives up and
// reports endless waiting (Options.updateCallBudget).
const defaultUpdateCallBudget = 100

// defaultSimulatorPodOptions are the upgrader pod options the
// Simulator's MachineUpdater mode puts before the UpdaterOptions'
// PodOptions unless Options.upgraderPodOptions replace them:
// simulatorUpgraderImage, a stage container copying the image's
// /staging, and the journaled runner ("/upgrader run") in one init
// container per step, as examples/inplace-extension runs it.
func defaultSimulatorPodOptions() []nodepod.Option {
	return []nodepod.Option{nodepod.WithImage(simulatorUpgraderImage), nodepod.WithStageFrom("/staging"), nodepod.WithRunnerCommand("/upgrader", "run")}
}

// setUpUpdater checks the MachineUpdater options once, and has the hosts
// report the commands they run.
func (s *Simulator) setUpUpdater() error {
	if s.callBudget < 1 {
		return fmt.Errorf("simulator: %w: update call budget %d: must be at least 1", ErrInvalidCluster, s.callBudget)
	}
	if _, err := capi.NewMachineUpdater(s.workload, s.updaterOptions()); err != nil {
		return fmt.Errorf("simulator: Options.MachineUpdater: %w", err)
	}
	for _, h := range s.fleet.Hosts() {
		h.observe = s.observer(h)
	}
	return nil
}

func (s *Simulator) updaterOptions() capi.UpdaterOptions {
	opts := s.updaterOpts
	opts.PodOptions = append(append([]nodepod.Option(nil), s.podOpts...), opts.PodOptions...)
	if opts.Clock == nil {
		opts.Clock = s.clock
	}
	opts.SkipDrain = true
	return opts
}

// workload is the updater's workload.Client: the fake cluster is its own
// workload cluster.
func (s *Simulator) workload(_ context.Context, cluster types.NamespacedName) (client.Client, error) {
	if cluster.Namespace != s.cl.Namespace() || cluster.Name != s.cl.Name() {
		return nil, fmt.Errorf("simulator: no workload cluster %s (the simulator has %s/%s)", cluster, s.cl.Namespace(), s.cl.Name())
	}
	return s.c, nil
}

// updaterRun is one machine's update in MachineUpdater mode.
type updaterRun struct {
	machine, node string
	batch         int
	res           *Result
	journal       string                // the host's journal directory
	steps         map[string]bool       // plan steps of the upgrader pods seen
	runners       map[string]*PodRunner // the kubelet's pods, by namespace/name
	gone          []*PodRunner          // pods deleted since the kubelet ran them
	unrunnable    map[string]bool       // pods the simulated kubelet cannot run, reported once
	ran           bool                  // a plan step's command ran on the host
	events        []Event               // runner restarts
	crashLog      int                   // Faults.Injected entries already seen
	restartPolicy map[string]corev1.RestartPolicy
}

// observer records the host's commands of the update under way and
// makes each take the simulator's step time.
func (s *Simulator) observer(h *Host) func(nodeexec.Command, nodeexec.Result, error) {
	return func(cmd nodeexec.Command, out nodeexec.Result, err error) {
		run := s.cur
		if run == nil || run.node != h.node || !run.steps[cmd.Step] {
			return
		}
		code := out.ExitCode
		if err != nil && code == 0 {
			code = -1
		}
		if cmd.Phase == nodeexec.PhaseRun {
			run.ran = true
		}
		run.res.Executions = append(run.res.Executions, Execution{Machine: run.machine, Step: cmd.Step, Phase: cmd.Phase, ExitCode: code, At: s.clock.Now()})
		s.clock.Step(s.stepTime)
	}
}

// Outcomes of UpdateMachine answers in the timeline (Event.Outcome of the
// "UpdateMachine/<phase>" events).
const (
	// answerWaiting: the hook answered RetryAfterSeconds > 0.
	answerWaiting = "Waiting"
	// answerDone: the hook answered Success with RetryAfterSeconds 0.
	answerDone = "Succeeded"
	// answerFailure: the hook answered Failure.
	answerFailure = "Failed"
)

// UpdateMachineStep prefixes the Step of the timeline events that show
// the UpdateMachine answers in MachineUpdater mode: one event per run of
// answers with the same phase (the node's ConditionInPlaceUpdate reason,
// observe.Reason*), "UpdateMachine/Upgrading" say.
const UpdateMachineStep = "UpdateMachine/"

// inPlaceUpdater updates one machine in place through capi.MachineUpdater.
func (s *Simulator) inPlaceUpdater(ctx context.Context, r Rollout, b strategy.Batch, pm strategy.PlannedMachine, res *Result) error {
	h := s.fleet.Host(pm.Node)
	if h == nil {
		return fmt.Errorf("no host for node %q", pm.Node)
	}
	staging := Staging{Kubernetes: r.ToVersion, Containerd: DefaultContainerdVersion, CNI: defaultCNIVersion}
	h.Stage(staging)
	start := s.clock.Now()
	event := func(step string, from, to time.Time, outcome string) Event {
		return Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: step, Start: from, End: to, Outcome: outcome}
	}
	if err := s.cordon(ctx, pm.Node); err != nil {
		s.emit(res, event("cordon", start, start, "Failed"))
		return err
	}
	req, err := s.updateRequest(ctx, pm, r)
	if err != nil {
		s.emit(res, event("UpdateMachine", start, start, "Failed"))
		if uerr := s.uncordon(ctx, pm.Node); uerr != nil {
			return errors.Join(err, uerr)
		}
		return err
	}
	run := &updaterRun{machine: pm.Machine, node: pm.Node, batch: b.Index, res: res, journal: filepath.Join(s.journal, pm.Node),
		steps: map[string]bool{}, runners: map[string]*PodRunner{}, restartPolicy: map[string]corev1.RestartPolicy{}, unrunnable: map[string]bool{}}
	if s.faults != nil {
		run.crashLog = len(s.faults.Injected())
	}
	s.cur = run
	defer func() { s.cur = nil }()

	var phases []Event // runs of answers with the same phase
	var answer runtimehooksv1.UpdateMachineResponse
	ended, calls := false, 0
	for ; calls < s.callBudget && !ended; calls++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		u, err := capi.NewMachineUpdater(s.workload, s.updaterOptions())
		if err != nil {
			return fmt.Errorf("simulator: Options.MachineUpdater: %w", err)
		}
		at := s.clock.Now()
		answer = runtimehooksv1.UpdateMachineResponse{}
		u.UpdateMachine(ctx, req.DeepCopy(), &answer)
		res.UpdateCalls++
		phase, outcome := s.answerPhase(ctx, pm.Node, &answer)
		if n := len(phases); n == 0 || phases[n-1].Step != UpdateMachineStep+phase {
			if n > 0 {
				phases[n-1].End = at
			}
			phases = append(phases, event(UpdateMachineStep+phase, at, at, outcome))
		}
		phases[len(phases)-1].Outcome = outcome
		if outcome != answerWaiting {
			ended = true
			break
		}
		s.playKubelet(ctx, h, run, staging)
		if next := at.Add(time.Duration(answer.RetryAfterSeconds) * time.Second); s.clock.Now().Before(next) {
			s.clock.SetTime(next)
		}
	}
	if n := len(phases); n > 0 && phases[n-1].Outcome == answerWaiting {
		phases[n-1].End = s.clock.Now()
	}
	rolledBack := s.emitUpdate(res, run, event, phases)

	var out error
	switch {
	case !ended:
		out = fmt.Errorf("no done and no Failure after %d UpdateMachine calls (endless waiting); last answer: %s", calls, answer.Message)
		res.Violations = append(res.Violations, fmt.Sprintf("%s: %v", pm.Machine, out))
		res.LeftCordoned = append(res.LeftCordoned, pm.Node)
	case answer.Status == runtimehooksv1.ResponseStatusFailure:
		out = errors.New(answer.Message)
		if !run.ran || rolledBack {
			// Nothing ran on the node, or the plan put it back: as it was.
			if err := s.uncordon(ctx, pm.Node); err != nil {
				return errors.Join(out, err)
			}
		} else {
			res.LeftCordoned = append(res.LeftCordoned, pm.Node)
		}
	default:
		if v := h.RunningVersion(ComponentKubelet); v != r.ToVersion || h.UnitState("kubelet") != UnitActive || h.UnitState("containerd") != UnitActive {
			res.Violations = append(res.Violations, fmt.Sprintf("%s: UpdateMachine answered done for node %s, which is not verified: kubelet %s (%s), containerd %s",
				pm.Machine, pm.Node, v, h.UnitState("kubelet"), h.UnitState("containerd")))
		}
		if err := s.setMachineVersion(ctx, pm.Machine, r.ToVersion, "", false); err != nil {
			return err
		}
		if err := s.uncordon(ctx, pm.Node); err != nil {
			return err
		}
	}
	if st := h.UnitState("kubelet"); st != UnitActive {
		res.Violations = append(res.Violations, fmt.Sprintf("%s: node %s left with its kubelet %s after its update (%s)", pm.Machine, pm.Node, st, answer.Message))
	}
	return out
}

// updateRequest is the request Cluster API sends for the machine: the
// desired Machine (spec.version the rollout's, no status) and its
// infrastructure machine.
func (s *Simulator) updateRequest(ctx context.Context, pm strategy.PlannedMachine, r Rollout) (*runtimehooksv1.UpdateMachineRequest, error) {
	key := client.ObjectKey{Namespace: s.cl.Namespace(), Name: pm.Machine}
	var m clusterv1.Machine
	if err := s.retry(func() error { return s.c.Get(ctx, key, &m) }); err != nil {
		return nil, fmt.Errorf("reading Machine %s: %w", key, err)
	}
	infra := s.newInfra()
	if err := s.retry(func() error { return s.c.Get(ctx, key, infra) }); err != nil {
		return nil, fmt.Errorf("reading the infrastructure machine %s: %w", key, err)
	}
	desired := clusterv1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID,
			Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: *m.Spec.DeepCopy(),
	}
	for k, v := range m.Labels {
		desired.Labels[k] = v
	}
	for k, v := range m.Annotations {
		desired.Annotations[k] = v
	}
	desired.Spec.Version = r.ToVersion
	if desired.Spec.ClusterName == "" {
		desired.Spec.ClusterName = s.cl.Name()
	}
	desired.Labels[clusterv1.ClusterNameLabel] = desired.Spec.ClusterName
	if pm.Role == strategy.RoleControlPlane {
		desired.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	return &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{
		Machine: desired, InfrastructureMachine: runtime.RawExtension{Object: infra}}}, nil
}

// answerPhase names an answer for the timeline: its phase (the node's
// ConditionInPlaceUpdate reason the updater wrote, when the answer is
// neither done nor a Failure) and its outcome (Answer*).
func (s *Simulator) answerPhase(ctx context.Context, node string, a *runtimehooksv1.UpdateMachineResponse) (string, string) {
	switch {
	case a.Status == runtimehooksv1.ResponseStatusFailure:
		return observe.ReasonFailed, answerFailure
	case a.RetryAfterSeconds == 0:
		return observe.ReasonSucceeded, answerDone
	}
	var n corev1.Node
	if err := s.c.Get(ctx, client.ObjectKey{Name: node}, &n); err == nil {
		if c := observe.InPlaceUpdateCondition(&n); c != nil && c.Reason != "" {
			return c.Reason, answerWaiting
		}
	}
	return observe.ReasonPending, answerWaiting
}

// playKubelet is the node's kubelet between two calls: it runs the
// upgrader pods bound to the node (PodRunner, a new one for a pod it has
// not seen) and writes their status back. A kubelet that cannot reach the
// API server (injected faults) tries again at the next round.
func (s *Simulator) playKubelet(ctx context.Context, h *Host, run *updaterRun, staging Staging) {
	var pods corev1.PodList
	if err := s.retry(func() error {
		return s.c.List(ctx, &pods, client.MatchingLabelsSelector{Selector: nodepod.Selector()})
	}); err != nil {
		return
	}
	seen := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != run.node || p.DeletionTimestamp != nil {
			continue
		}
		key := p.Namespace + "/" + p.Name
		seen[key] = true
		for _, st := range strings.Split(p.Annotations[nodepod.AnnotationSteps], ",") {
			if st != "" {
				run.steps[st] = true
			}
		}
		if run.unrunnable[key] {
			continue
		}
		pr, ok := run.runners[key]
		if !ok {
			var err error
			pr, err = NewPodRunner(h, p, WithPodJournalDir(run.journal), WithPodImageStaging(staging), withPodMaxRestarts(s.maxRestarts))
			if err != nil {
				// A pod no kubelet can run: it stays Pending, and the
				// updater's answers show it.
				run.res.Violations = append(run.res.Violations, fmt.Sprintf("%s: the simulated kubelet cannot run upgrader pod %s: %v", run.machine, key, err))
				run.unrunnable[key] = true
				continue
			}
			run.runners[key] = pr
			run.restartPolicy[key] = p.Spec.RestartPolicy
		}
		before := len(run.res.Executions)
		if _, err := pr.Run(ctx); err != nil {
			return // ctx ended
		}
		s.takeCrashes(run, run.restartPolicy[key], before)
		status := pr.Pod().Status
		_ = s.retry(func() error {
			var cur corev1.Pod
			if err := s.c.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			}
			if apiequality.Semantic.DeepEqual(cur.Status, status) {
				return nil
			}
			cur.Status = status
			return s.c.Status().Update(ctx, &cur)
		})
	}
	for key, pr := range run.runners {
		if !seen[key] {
			run.gone = append(run.gone, pr)
			delete(run.runners, key)
		}
	}
}

// takeCrashes accounts for the runner crashes injected on the node while
// the kubelet ran a pod: a crash during a step marks its command Crashed
// (its completion never reached the journal, so it may run again), and a
// restartPolicy OnFailure pod restarts the runner, which resumes from the
// journal. The commands of this run of the pod start at Executions[from].
func (s *Simulator) takeCrashes(run *updaterRun, policy corev1.RestartPolicy, from int) {
	if s.faults == nil {
		return
	}
	log := s.faults.Injected()
	news := log[min(run.crashLog, len(log)):]
	run.crashLog = len(log)
	for _, inj := range news {
		if inj.Node != run.node || !strings.HasPrefix(inj.What, "crash-") {
			continue
		}
		if inj.What == "crash-"+string(CrashPointDuring) {
			// The step's first success in this run: a crash rule fires at
			// its first chance, and the resumed runner's rerun comes after.
			ex := run.res.Executions
			for i := from; i < len(ex); i++ {
				if ex[i].Machine == run.machine && ex[i].Step == inj.Step && ex[i].Phase == nodeexec.PhaseRun && ex[i].ExitCode == 0 && !ex[i].Crashed {
					ex[i].Crashed = true
					break
				}
			}
		}
		at := s.clock.Now()
		run.events = append(run.events, Event{Machine: run.machine, Batch: run.batch, Method: strategy.MethodInPlace, Step: "runner-restart", Start: at, End: at, Outcome: "Crashed"})
		if policy != corev1.RestartPolicyNever {
			run.res.Restarts++
		}
	}
}

// emitUpdate emits the update's timeline: one event per plan step (from
// the journals on the host, or, with no journal, from the upgrader pods'
// container statuses), the runner restarts, then the answers. It
// reports whether a plan rolled back.
func (s *Simulator) emitUpdate(res *Result, run *updaterRun, event func(string, time.Time, time.Time, string) Event, phases []Event) bool {
	var evs []Event
	rolledBack := false
	now := s.clock.Now()
	entries, _ := os.ReadDir(run.journal)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".journal.json") {
			continue
		}
		j, err := nodeexec.ReadJournal(filepath.Join(run.journal, e.Name()))
		if err != nil {
			res.Violations = append(res.Violations, fmt.Sprintf("%s: journal %s: %v", run.machine, e.Name(), err))
			continue
		}
		rolledBack = rolledBack || j.State == nodeexec.PlanStateRolledBack
		for _, st := range j.Steps {
			if st.Started.IsZero() {
				continue
			}
			end := st.Finished
			if end.IsZero() {
				end = now
			}
			evs = append(evs, event(st.Name, st.Started, end, string(st.State)))
		}
	}
	if len(evs) == 0 {
		pods := append([]*PodRunner(nil), run.gone...)
		keys := make([]string, 0, len(run.runners))
		for k := range run.runners {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			pods = append(pods, run.runners[k])
		}
		for _, pr := range pods {
			p := pr.Pod()
			for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if !run.steps[cs.Name] {
					continue
				}
				switch {
				case cs.State.Terminated != nil:
					t := cs.State.Terminated
					outcome := string(nodeexec.StepStateSucceeded)
					if t.ExitCode != 0 {
						outcome = string(nodeexec.StepStateFailed)
					}
					evs = append(evs, event(cs.Name, t.StartedAt.Time, t.FinishedAt.Time, outcome))
				case cs.State.Running != nil:
					evs = append(evs, event(cs.Name, cs.State.Running.StartedAt.Time, now, string(nodeexec.StepStateRunning)))
				}
			}
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Start.Before(evs[j].Start) })
	all := append(append(evs, run.events...), phases...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].Start.Before(all[j].Start) })
	for _, e := range all {
		s.emit(res, e)
	}
	return rolledBack
}
