package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// Rollout is the change a simulation applies to every machine.
type Rollout struct {
	// ToVersion is the desired Kubernetes version.
	ToVersion string
	// Images gives pools a new infrastructure image ("" is the control
	// plane, otherwise a MachineDeployment's short name). An image cannot
	// change in place, so those machines are replaced.
	Images map[string]string
}

// Event is one bar of the timeline: a step of an in-place plan, or a phase
// of a replacement, on one machine, in virtual time.
type Event struct {
	Machine string          `json:"machine"`
	Batch   int             `json:"batch"`
	Method  strategy.Method `json:"method"`
	Step    string          `json:"step"`
	Start   time.Time       `json:"start"`
	End     time.Time       `json:"end"`
	// Outcome is Succeeded, Failed, RolledBack... (nodeexec step states),
	// Replaced, or Crashed (the runner died; a new one resumed from the
	// journal).
	Outcome string `json:"outcome"`
	// Attempts counts runs of the step's command (more than 1: retried).
	Attempts int `json:"attempts,omitempty"`
}

// Execution is one command a simulated host ran (or would have run, when
// the runner crashed first), in the order they ran.
type Execution struct {
	Machine  string         `json:"machine"`
	Step     string         `json:"step"`
	Phase    nodeexec.Phase `json:"phase"`
	ExitCode int            `json:"exitCode"`
	// Crashed marks the command during which (CrashPointDuring) or right
	// before which (CrashPointAfter the previous step; the command then did
	// not run) the runner crashed.
	Crashed bool      `json:"crashed,omitempty"`
	At      time.Time `json:"at"`
}

// Result is what a simulation did.
type Result struct {
	// Plan is the rollout plan the rollout started with.
	Plan *strategy.RolloutPlan `json:"plan"`
	// Plans are every plan the rollout followed: Plan, then one more per
	// controller crash (Faults.CrashController), made from the cluster as
	// it was then. Event batch numbers refer to the plan in force.
	Plans []*strategy.RolloutPlan `json:"plans"`
	// Events is the timeline, in the order things happened.
	Events []Event `json:"events"`
	// Executions are the host commands, in order.
	Executions []Execution `json:"executions,omitempty"`
	// Start and End bound the rollout in virtual time.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Limits is how many machines of each group ("" is the control plane)
	// may be disrupted at once: the group's maxSurge + maxUnavailable, at
	// least 1; 1 for the control plane.
	Limits map[string]int `json:"limits"`
	// CordonedBefore lists the nodes that were unschedulable before the
	// rollout (someone else's cordon: they must stay cordoned).
	CordonedBefore []string `json:"cordonedBefore,omitempty"`
	// LeftCordoned lists nodes the simulator cordoned and left cordoned on
	// purpose: their update failed without a rollback, so they need a
	// person.
	LeftCordoned []string `json:"leftCordoned,omitempty"`
	// Restarts counts runner restarts after injected crashes.
	Restarts int `json:"restarts,omitempty"`
	// ControllerRestarts counts controller crashes, each followed by a new
	// plan.
	ControllerRestarts int `json:"controllerRestarts,omitempty"`
	// Failed lists machines whose update failed.
	Failed []string `json:"failed,omitempty"`
	// Reasons says why each machine of Failed failed: the error of its
	// update. In MachineUpdater mode (Options.MachineUpdater) it is the hook's
	// Failure message, which starts with capi.ErrUpdateFailed's text and a
	// observe.Failure* reason ("in-place update failed: StepFailed: ...").
	Reasons map[string]string `json:"reasons,omitempty"`
	// UpdateCalls counts the UpdateMachine calls made in MachineUpdater
	// mode (0 otherwise).
	UpdateCalls int `json:"updateCalls,omitempty"`
	// Held lists machines a plan batched that the simulator did not start,
	// because failures made it unsafe: a group whose machines left
	// cordoned already use its disruption limit, or workers behind a
	// control plane machine that failed. They keep their old state.
	Held []Hold `json:"held,omitempty"`
	// Violations lists broken invariants (empty when all held).
	Violations []string `json:"violations,omitempty"`
	// Unhealthy lists machines whose update succeeded but whose node went
	// bad after it (Faults.UnhealthyAfterUpdate).
	Unhealthy []string `json:"unhealthy,omitempty"`
	// Breakers lists the groups whose circuit breaker (Options.Breaker)
	// tripped, in the order they tripped.
	Breakers []BreakerTrip `json:"breakers,omitempty"`
	// GateWaits is the virtual time machines waited at closed gates
	// (Options.Gates), by machine.
	GateWaits map[string]time.Duration `json:"gateWaits,omitempty"`
	// OnFailure is the failure policy the run followed (Options.OnFailure;
	// "" is FailurePolicyStall, the default).
	OnFailure FailurePolicy `json:"onFailure,omitempty"`
}

// FailurePolicy says what the simulated controllers do once a machine's
// update has failed (Options.OnFailure).
type FailurePolicy string

const (
	// FailurePolicyStall, the default, is what Cluster API v1.14 does. The
	// Machine stays Updating (reason InPlaceUpdateFailed), so neither
	// Ready nor Available, and Cluster API calls UpdateMachine again, with
	// backoff, for as long as it answers Failure; it never gives up on it.
	// Its MachineDeployment counts it as unavailable in the new
	// MachineSet, so it uses one of the group's maxSurge+maxUnavailable
	// slots until it is fixed: the group starts other machines only while
	// slots remain (with the default maxSurge 1, maxUnavailable 0, none).
	// KubeadmControlPlane waits for an in-place update in progress to
	// complete before it touches any other control plane machine, so a
	// failed control plane machine stops the rest of the control plane
	// (and the workers wait behind it, version skew). The failed machine
	// gets a StallStep event from its failure to the end of the run, and
	// the machines not started are Held.
	FailurePolicyStall FailurePolicy = "stall"
	// FailurePolicyContinue carries on as if the failed machine had been fixed
	// at once: a failed update whose plan rolled back frees its slot, and
	// only machines left cordoned (failed without a rollback) count
	// against their group's limit. A control plane failure still holds
	// the workers. It shows the rest of a rollout after a failure, which
	// Cluster API itself would not reach.
	FailurePolicyContinue FailurePolicy = "continue"
)

// StallStep is the Step of the event that shows a failed machine staying
// unavailable, from its failure to the end of the run, under FailurePolicyStall
// (Outcome "Blocked").
const StallStep = "failed-update-retried"

// BreakerTrip is a group's circuit breaker tripping during a run.
type BreakerTrip struct {
	// Group is the group ("" for the control plane).
	Group string `json:"group"`
	// After is the machine whose outcome tripped it.
	After string `json:"after"`
	// Bad and Size are the group's bad machines and size then; Limit is
	// the breaker's maxUnhealthy for that size.
	Bad, Size, Limit int
	// Reason says why, in words.
	Reason string `json:"reason"`
}

// Hold is a machine the simulator held back, and why.
type Hold struct {
	Machine string `json:"machine"`
	Reason  string `json:"reason"`
}

// failedAnnotation is set on a Machine whose update failed in a
// simulation (the value says how), so that a controller planning again
// after a crash sees the failure (strategy.Machine.Failed) and counts it
// against its circuit breaker instead of retrying blindly.
const failedAnnotation = "fake.upgradekit.io/update-failed"

// simulatorCordonOwner is the owner the Simulator writes into the
// nodeexec/drain cordon record (drain.AnnotationCordon) of the nodes it
// cordons.
const simulatorCordonOwner = "upgradekit-simulator"

// Simulator runs a rollout plan from package strategy over a fake cluster
// with simulated hosts, on a virtual clock: in-place machines are cordoned,
// run the real kubeadm plans through nodeexec's Runner against their Host
// (restarted on the same journal after injected crashes) and are
// uncordoned; replaced machines are swapped for new ones at the desired
// version. After every batch and at the end it checks the invariants
// (CheckSkew, CheckDisruption, CheckNoRerun, CheckCordons, converged
// versions). Options.MachineUpdater has a real capi.MachineUpdater update the
// in-place machines instead, called as Cluster API calls it, with the
// hosts' kubelets running its upgrader pods (see the package
// documentation). Prefer harness/apiserver when the test is about the API
// server itself.
type Simulator struct {
	cl           *Cluster
	c            client.WithWatch
	fleet        *Fleet
	clock        *clocktesting.FakeClock
	planner      *strategy.Planner
	strategy     strategy.Strategy
	stepTime     time.Duration
	replace      time.Duration
	gate         time.Duration
	maxRestarts  int
	journal      string                                  // WithMachineUpdater: the hosts' journal directories, under it
	journals     map[string]*nodeexec.MemoryJournalStore // node -> the journals of its in-place plans, for one Run
	faults       *Faults
	onEvent      func(Event)
	roles        map[string]strategy.Role
	pools        map[string]string // node -> machine deployment ("" for the control plane)
	versions     map[string]string // node -> kubelet version, as last read
	controlPlane []string
	// MachineUpdater mode (Options.MachineUpdater).
	updater     bool
	updaterOpts capi.UpdaterOptions
	podOpts     []nodepod.Option
	callBudget  int
	cur         *updaterRun // the in-place update under way, for the hosts' observers
	// breaker and gates: Options.Breaker, Gates, GateMaxWait.
	breaker  *strategy.Breaker
	gates    strategy.Gate
	gateWait time.Duration
	// onFailure: Options.OnFailure.
	onFailure FailurePolicy
	// differ diffs each machine against the rollout (diff.InPlaceUpdate),
	// compiled once: building it costs more than a diff.
	differ *diff.Differ
}

// NewSimulator builds the fake cluster's client and hosts. The clock starts
// at a fixed time, so timelines are reproducible. The client is an
// in-memory API server of the simulator's own, not Cluster.Client's
// controller-runtime fake client: it answers as kube-apiserver does where
// the simulation depends on it and copies objects instead of encoding
// them (docs/simulator.md says what it does not model; it has no
// server-side apply, Watch or Eviction API). An invalid Options.OnFailure is an error
// wrapping ErrInvalidCluster; Options.MachineUpdater that
// capi.NewMachineUpdater refuses are its error (capi.ErrInvalidOption),
// wrapped.
func NewSimulator(cl *Cluster, opts Options) (*Simulator, error) {
	if cl == nil {
		return nil, errNilCluster
	}
	s := &Simulator{cl: cl, stepTime: 20 * time.Second, replace: 4 * time.Minute, gate: time.Minute, maxRestarts: 3,
		clock:      clocktesting.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)),
		podOpts:    defaultSimulatorPodOptions(),
		callBudget: defaultUpdateCallBudget}
	opts.apply(s)
	if s.maxRestarts < 0 {
		return nil, fmt.Errorf("simulator: %w: max restarts %d is negative", ErrInvalidCluster, s.maxRestarts)
	}
	switch s.onFailure {
	case "":
		s.onFailure = FailurePolicyStall
	case FailurePolicyStall, FailurePolicyContinue:
	default:
		return nil, fmt.Errorf("simulator: %w: Options.OnFailure: failure policy %s: want %s or %s", ErrInvalidCluster, errtext.Quote(string(s.onFailure)), FailurePolicyStall, FailurePolicyContinue)
	}
	var funcs *interceptor.Funcs
	if s.faults != nil {
		f := s.faults.Interceptor()
		funcs = &f
	}
	c, err := cl.memClient(s.clock, funcs)
	if err != nil {
		return nil, err
	}
	s.c = c
	hopts := []HostOption{WithNodeClient(c), WithHostClock(s.clock)}
	if s.faults != nil {
		hopts = append(hopts, WithFaults(s.faults))
	}
	if s.fleet, err = NewFleet(cl, hopts...); err != nil {
		return nil, err
	}
	if s.updater {
		if err := s.setUpUpdater(); err != nil {
			return nil, err
		}
	}
	if s.differ, err = diff.New(diff.InPlaceUpdate()); err != nil {
		return nil, err
	}
	s.roles, s.pools, s.versions = map[string]strategy.Role{}, map[string]string{}, map[string]string{}
	for _, n := range cl.Nodes() {
		s.roles[n.Name], s.pools[n.Name], s.versions[n.Name] = n.Role, n.Pool, n.Version
		if n.Role == strategy.RoleControlPlane {
			s.controlPlane = append(s.controlPlane, n.Name)
		}
	}
	if s.planner == nil {
		kubeadmUpdater, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
		if err != nil {
			return nil, err
		}
		if s.strategy == nil {
			rolling, err := strategy.RollingReplaceStrategy(strategy.RollingUpdate{})
			if err != nil {
				return nil, err
			}
			if s.strategy, err = strategy.FallbackStrategy(rolling); err != nil {
				return nil, err
			}
		}
		if s.planner, err = strategy.NewPlanner(strategy.PlannerOptions{Decider: strategy.Updaters(kubeadmUpdater),
			Strategy: s.strategy, Clock: s.clock}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Client is the fake cluster's client: the simulator's in-memory API
// server (see NewSimulator), with the fault interceptor when
// Options.Faults is set.
func (s *Simulator) Client() client.Client { return s.c }

// Fleet is the cluster's simulated hosts.
func (s *Simulator) Fleet() *Fleet { return s.fleet }

// Input builds the planner's view of the cluster for a rollout: every
// machine with its diff against the desired state, and each worker group
// with its MachineDeployment's rolling update limits.
func (s *Simulator) Input(ctx context.Context, r Rollout) (strategy.Cluster, error) {
	if s.cl == nil || s.c == nil || s.differ == nil {
		return strategy.Cluster{}, fmt.Errorf("simulator: %w: Simulator not made by NewSimulator", ErrInvalidCluster)
	}
	if _, err := version.ParseSemantic(r.ToVersion); err != nil {
		return strategy.Cluster{}, fmt.Errorf("%w: rollout version %s is not a version", ErrInvalidCluster, errtext.Quote(r.ToVersion))
	}
	in := strategy.Cluster{Name: s.cl.Name(), TargetVersion: r.ToVersion}
	groups := map[string]int{}
	for _, n := range s.cl.Nodes() {
		m, err := s.machine(ctx, n, r)
		if err != nil {
			return in, err
		}
		if n.Role == strategy.RoleControlPlane {
			in.ControlPlane = append(in.ControlPlane, m)
			continue
		}
		i, ok := groups[n.Pool]
		if !ok {
			var md clusterv1.MachineDeployment
			if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.cl.Namespace(), Name: s.cl.name + "-" + n.Pool}, &md); err != nil {
				return in, err
			}
			ru := md.Spec.Rollout.Strategy.RollingUpdate
			i = len(in.Workers)
			groups[n.Pool] = i
			in.Workers = append(in.Workers, strategy.Group{Name: n.Pool,
				Rollout: strategy.RollingUpdate{MaxSurge: ru.MaxSurge, MaxUnavailable: ru.MaxUnavailable}})
		}
		in.Workers[i].Machines = append(in.Workers[i].Machines, m)
	}
	return in, nil
}

func (s *Simulator) machine(ctx context.Context, n NodeInfo, r Rollout) (strategy.Machine, error) {
	ns := s.cl.Namespace()
	var m clusterv1.Machine
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Name}, &m); err != nil {
		return strategy.Machine{}, err
	}
	infra := s.newInfra()
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Name}, infra); err != nil {
		return strategy.Machine{}, err
	}
	var node corev1.Node
	if err := s.c.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
		return strategy.Machine{}, err
	}
	desired := m.DeepCopy()
	desired.Spec.Version = r.ToVersion
	desiredInfra := infra.DeepCopy()
	if img, ok := r.Images[n.Pool]; ok {
		if err := unstructured.SetNestedField(desiredInfra.Object, img, s.cl.infra.ImageField...); err != nil {
			return strategy.Machine{}, err
		}
	}
	cur, des := diff.State{Machine: &m, Infrastructure: infra}, diff.State{Machine: desired, Infrastructure: desiredInfra}
	if n.Role == strategy.RoleControlPlane && !kubeletLocalMode(m.Spec.Version) && kubeletLocalMode(r.ToVersion) {
		// KubeadmControlPlane turns the gate on in the machine's
		// KubeadmConfig with the version; no kubeadm plan switches a
		// running kubelet to the local API server, so Cluster API's
		// extension declines and the machine is replaced. Its removal at
		// v1.36 comes with the version (kubeadm keeps the local mode), so
		// it is no change of its own.
		gates := func(g map[string]any) map[string]any {
			return map[string]any{"apiVersion": bootstrapv1.GroupVersion.String(), "kind": "KubeadmConfig",
				"spec": map[string]any{"clusterConfiguration": map[string]any{"featureGates": g}}}
		}
		cur.Bootstrap, des.Bootstrap = gates(map[string]any{}), gates(map[string]any{kubeletLocalModeGate: true})
	}
	cs, err := s.differ.Machines(cur, des)
	if err != nil {
		return strategy.Machine{}, err
	}
	_, failed := m.Annotations[failedAnnotation]
	return strategy.Machine{Name: n.Name, NodeName: n.Name, Version: node.Status.NodeInfo.KubeletVersion, Ready: nodeReady(&node),
		Created: m.CreationTimestamp.Time, Changes: cs, Failed: failed, Annotations: m.Annotations, NodeAnnotations: node.Annotations}, nil
}

// kubeletLocalModeGate is kubeadm's ControlPlaneKubeletLocalMode feature
// gate: a control plane node's kubelet talks to its own API server.
const kubeletLocalModeGate = "ControlPlaneKubeletLocalMode"

// kubeletLocalMode reports whether KubeadmControlPlane (Cluster API v1.14,
// DefaultFeatureGates) sets kubeletLocalModeGate on a control plane
// machine's KubeadmConfig at version v: from v1.31 until v1.36, where
// kubeadm removed the gate (locked on since v1.35). A version that does
// not parse has no gate; Input refuses it anyway.
func kubeletLocalMode(v string) bool {
	parsed, err := version.ParseSemantic(v)
	if err != nil {
		return false
	}
	minor := version.MajorMinor(parsed.Major(), parsed.Minor())
	return !minor.LessThan(version.MajorMinor(1, 31)) && minor.LessThan(version.MajorMinor(1, 36))
}

func (s *Simulator) newInfra() *unstructured.Unstructured {
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(s.cl.infra.APIVersion)
	infra.SetKind(s.cl.infra.Kind)
	return infra
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Plan plans the rollout without running it.
func (s *Simulator) Plan(ctx context.Context, r Rollout) (*strategy.RolloutPlan, error) {
	in, err := s.Input(ctx, r)
	if err != nil {
		return nil, err
	}
	return s.planner.Plan(ctx, in)
}

// Run plans the rollout and executes it batch by batch. Machines of one
// batch run side by side in virtual time; a health gate waits a minute.
// The error is for what stops the simulation itself (an invalid rollout,
// a canceled context, an API error outside a machine's update); failed
// machines and broken invariants are in the Result.
func (s *Simulator) Run(ctx context.Context, r Rollout) (*Result, error) {
	in, err := s.Input(ctx, r)
	if err != nil {
		return nil, err
	}
	plan, err := s.planner.Plan(ctx, in)
	if err != nil {
		return nil, err
	}
	stall := s.onFailure != FailurePolicyContinue
	res := &Result{Plan: plan, Start: s.clock.Now(), Limits: map[string]int{"": 1}, OnFailure: FailurePolicyContinue}
	if stall {
		res.OnFailure = FailurePolicyStall
	}
	sizes := map[string]int{"": len(in.ControlPlane)}
	for _, g := range in.Workers {
		sizes[g.Name] = len(g.Machines)
	}
	bad := map[string]int{}        // per group: failed or unhealthy machines
	tripped := map[string]string{} // per group: why its breaker (or a gate's Stop) holds it
	for _, g := range in.Workers {
		surge, unavail, err := g.Rollout.Limits(len(g.Machines))
		if err != nil {
			return nil, err
		}
		res.Limits[g.Name] = max(1, surge+unavail)
	}
	var nodes corev1.NodeList
	if err := s.c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			res.CordonedBefore = append(res.CordonedBefore, n.Name)
		}
	}
	// In-place plans journal in memory, one store per host and per Run,
	// as the host's disk would keep them (see runPlan). The upgrader pods
	// of WithMachineUpdater run the runner as the node image does, on a
	// journal directory: fsynced at every step, which on tmpfs costs
	// nothing, and a simulation has no power loss to survive.
	s.journals = map[string]*nodeexec.MemoryJournalStore{}
	if s.updater {
		dir := ""
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			dir = "/dev/shm"
		}
		journal, err := os.MkdirTemp(dir, "upgradekit-sim-journal-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(journal)
		s.journal = journal
	}
	oldestCP := s.oldestControlPlane()
	var allNodes []string
	for n := range s.versions {
		allNodes = append(allNodes, n)
	}
	sort.Strings(allNodes)
	res.Plans = []*strategy.RolloutPlan{plan}
	completed := 0
	stuck := map[string]int{}    // per group: machines left cordoned by earlier batches
	failedIn := map[string]int{} // per group: machines that failed in earlier batches
	var stalled []Event          // per failed machine, from its failure on
	cpFailed := ""               // a control plane machine whose update failed
	for {
		byName := map[string]strategy.PlannedMachine{}
		for _, pm := range plan.Machines {
			byName[pm.Machine] = pm
		}
		crashed := false
		for _, b := range plan.Batches {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			start := s.clock.Now()
			end := start
			inBatch := map[string]int{}
			leftBefore, failedBefore := len(res.LeftCordoned), len(res.Failed)
			for _, name := range b.Machines {
				s.clock.SetTime(start)
				pm := byName[name]
				// What a controller must not do after failures: disrupt more
				// of a group than its limit while failed machines are still
				// out of service, or move workers past a control plane that
				// did not make it.
				// Under FailurePolicyStall, also what Cluster API does not do: start
				// a machine of a group whose failed machines (unavailable
				// while it retries them) use up its limit, or any control
				// plane machine after one failed.
				switch {
				case pm.Role == strategy.RoleWorker && cpFailed != "":
					res.Held = append(res.Held, Hold{Machine: name, Reason: fmt.Sprintf("control plane machine %s failed: workers wait (version skew)", cpFailed)})
					continue
				case stall && pm.Role == strategy.RoleControlPlane && cpFailed != "":
					res.Held = append(res.Held, Hold{Machine: name, Reason: fmt.Sprintf("KubeadmControlPlane waits for the in-place update of %s to complete; it failed, and Cluster API retries it", cpFailed)})
					continue
				case stall && failedIn[pm.Group]+inBatch[pm.Group]+1 > res.Limits[pm.Group]:
					res.Held = append(res.Held, Hold{Machine: name, Reason: fmt.Sprintf("%d failed machines of the group stay unavailable while Cluster API retries them; the limit (maxSurge+maxUnavailable) is %d", failedIn[pm.Group], res.Limits[pm.Group])})
					continue
				case !stall && stuck[pm.Group]+inBatch[pm.Group]+1 > res.Limits[pm.Group]:
					res.Held = append(res.Held, Hold{Machine: name, Reason: fmt.Sprintf("%d machines of the group are left cordoned after failures; the limit is %d", stuck[pm.Group], res.Limits[pm.Group])})
					continue
				case tripped[pm.Group] != "":
					res.Held = append(res.Held, Hold{Machine: name, Reason: tripped[pm.Group]})
					continue
				}
				if why, ok := s.waitForGates(ctx, pm, res); !ok {
					res.Held = append(res.Held, Hold{Machine: name, Reason: why})
					if strings.HasPrefix(why, "Stop") {
						tripped[pm.Group] = why
					}
					continue
				}
				inBatch[pm.Group]++
				err := s.runMachine(ctx, r, b, pm, res)
				if err == nil && s.faults.TakeUnhealthy(pm.Machine) {
					res.Unhealthy = append(res.Unhealthy, name)
					if h := s.fleet.Host(pm.Node); h != nil {
						if err := h.NodeNotReady(ctx); err != nil {
							return res, err
						}
					}
					bad[pm.Group]++
					s.tripBreaker(pm, sizes, bad, tripped, res)
				}
				if err != nil {
					bad[pm.Group]++
					s.tripBreaker(pm, sizes, bad, tripped, res)
				}
				if err != nil {
					if ctx.Err() != nil {
						return res, ctx.Err()
					}
					res.Failed = append(res.Failed, name)
					if res.Reasons == nil {
						res.Reasons = map[string]string{}
					}
					res.Reasons[name] = err.Error()
					stalled = append(stalled, Event{Machine: name, Batch: b.Index, Method: pm.Method, Step: StallStep, Start: s.clock.Now(), Outcome: "Blocked"})
					if pm.Role == strategy.RoleControlPlane && cpFailed == "" {
						cpFailed = name
					}
					if err := s.markFailed(ctx, name, err); err != nil {
						return res, err
					}
				}
				if now := s.clock.Now(); now.After(end) {
					end = now
				}
			}
			for _, n := range res.LeftCordoned[leftBefore:] {
				stuck[s.pools[n]]++
			}
			for _, m := range res.Failed[failedBefore:] {
				failedIn[byName[m].Group]++
			}
			s.clock.SetTime(end)
			if b.HealthGate {
				s.clock.Step(s.gate)
			}
			// Skew after the batch: only this batch's nodes changed, and the
			// oldest control plane kubelet only moves up, unless a rollback
			// moved it down: then every worker is checked again.
			names := b.Machines
			cp := s.refreshVersions(ctx, b.Machines)
			if cp != nil && oldestCP != nil && cp.LessThan(oldestCP) {
				names = allNodes
			}
			oldestCP = cp
			res.Violations = append(res.Violations, skewViolations(b.Index, oldestCP, s.versions, s.roles, names)...)
			completed++
			if s.faults != nil && s.faults.TakeControllerCrash(completed) {
				crashed = true
				break
			}
		}
		if !crashed {
			break
		}
		// A new controller knows only what the cluster says.
		res.ControllerRestarts++
		in, err := s.Input(ctx, r)
		if err != nil {
			return res, err
		}
		if plan, err = s.planner.Plan(ctx, in); err != nil {
			return res, err
		}
		res.Plans = append(res.Plans, plan)
	}
	res.End = s.clock.Now()
	if stall {
		// Cluster API keeps the failed machines Updating, and unavailable,
		// to the end.
		for _, e := range stalled {
			e.End = res.End
			s.emit(res, e)
		}
	}
	res.Violations = append(res.Violations, s.checkConverged(ctx, r, res)...)
	res.Violations = append(res.Violations, CheckSkew(ctx, s.c, s.cl)...)
	res.Violations = append(res.Violations, CheckDisruption(res)...)
	res.Violations = append(res.Violations, CheckNoRerun(res)...)
	res.Violations = append(res.Violations, CheckCordons(ctx, s.c, res)...)
	res.Violations = append(res.Violations, CheckStall(res)...)
	if s.breaker != nil {
		res.Violations = append(res.Violations, CheckBreaker(res, *s.breaker)...)
	}
	return res, nil
}

// tripBreaker records the group's breaker tripping when its bad machines
// now exceed the limit (a breaker that does not parse trips at once,
// failing closed).
func (s *Simulator) tripBreaker(pm strategy.PlannedMachine, sizes, bad map[string]int, tripped map[string]string, res *Result) {
	if s.breaker == nil || tripped[pm.Group] != "" {
		return
	}
	limit, _ := s.breaker.Limit(sizes[pm.Group])
	trip, why, err := s.breaker.Tripped(sizes[pm.Group], bad[pm.Group])
	if err != nil {
		trip, why = true, "circuit breaker: "+err.Error()
	}
	if !trip {
		return
	}
	tripped[pm.Group] = why
	res.Breakers = append(res.Breakers, BreakerTrip{Group: pm.Group, After: pm.Machine, Bad: bad[pm.Group], Size: sizes[pm.Group], Limit: limit, Reason: why})
}

// waitForGates asks Options.Gates about pm at the virtual time,
// waiting (advancing the clock) while they answer Wait. It reports false
// with why when the machine must be held: a Stop ("Stop ..."), or gates
// still closed after the longest wait.
func (s *Simulator) waitForGates(ctx context.Context, pm strategy.PlannedMachine, res *Result) (string, bool) {
	if s.gates == nil {
		return "", true
	}
	began := s.clock.Now()
	for {
		r := s.gates.Check(ctx, strategy.GateRequest{Cluster: "default/" + s.cl.name, Group: pm.Group, Role: pm.Role, Machine: pm.Machine, Node: pm.Node, Now: s.clock.Now()})
		switch r.Verdict {
		case strategy.VerdictAllow:
			if waited := s.clock.Now().Sub(began); waited > 0 {
				if res.GateWaits == nil {
					res.GateWaits = map[string]time.Duration{}
				}
				res.GateWaits[pm.Machine] = waited
			}
			return "", true
		case strategy.VerdictStop:
			return r.String(), false
		}
		step := r.RetryAfter
		if step <= 0 {
			step = time.Minute
		}
		if s.clock.Now().Add(step).Sub(began) > s.gateWait {
			return fmt.Sprintf("gates still closed after %s: %s", s.clock.Now().Sub(began), r.String()), false
		}
		s.clock.Step(step)
	}
}

// refreshVersions reads the kubelet versions of the named nodes and
// returns the oldest control plane kubelet's.
func (s *Simulator) refreshVersions(ctx context.Context, names []string) *version.Version {
	for _, name := range names {
		var n corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &n); err == nil {
			s.versions[name] = n.Status.NodeInfo.KubeletVersion
		}
	}
	return s.oldestControlPlane()
}

func (s *Simulator) oldestControlPlane() *version.Version {
	cps := make(map[string]string, len(s.controlPlane))
	for _, n := range s.controlPlane {
		cps[n] = s.versions[n]
	}
	return oldestControlPlane(cps, s.roles)
}

func (s *Simulator) emit(res *Result, e Event) {
	res.Events = append(res.Events, e)
	if s.onEvent != nil {
		s.onEvent(e)
	}
}

func (s *Simulator) runMachine(ctx context.Context, r Rollout, b strategy.Batch, pm strategy.PlannedMachine, res *Result) error {
	switch pm.Method {
	case strategy.MethodInPlace:
		if s.updater {
			return s.inPlaceUpdater(ctx, r, b, pm, res)
		}
		return s.inPlace(ctx, r, b, pm, res)
	case strategy.MethodReplace, strategy.MethodReplaceFirst:
		return s.replaceMachine(ctx, r, b, pm, res)
	}
	return nil
}

// errCrashed is what the executor answers when the simulated runner
// process dies.
var errCrashed = errors.New("simulator: simulated runner crash")

func (s *Simulator) inPlace(ctx context.Context, r Rollout, b strategy.Batch, pm strategy.PlannedMachine, res *Result) error {
	h := s.fleet.Host(pm.Node)
	if h == nil {
		return fmt.Errorf("no host for node %q", pm.Node)
	}
	role := kubeadm.RoleWorker
	if pm.Role == strategy.RoleControlPlane {
		role = kubeadm.RoleControlPlane
		if s.fleet.ClusterVersion() != r.ToVersion {
			role = kubeadm.RoleFirstControlPlane
		}
	}
	h.Stage(Staging{Kubernetes: r.ToVersion, Containerd: DefaultContainerdVersion, CNI: defaultCNIVersion})
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: pm.Node, Role: role, FromVersion: pm.FromVersion, ToVersion: r.ToVersion, RollbackOnFailure: true})
	if err != nil {
		s.emit(res, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: "plan", Start: s.clock.Now(), End: s.clock.Now(), Outcome: "Failed"})
		return err
	}
	start := s.clock.Now()
	if err := s.cordon(ctx, pm.Node); err != nil {
		s.emit(res, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: "cordon", Start: start, End: start, Outcome: "Failed"})
		return err
	}
	var events []Event // the runner's restarts, then the steps
	out, runErr := s.runPlan(ctx, h, pm, b, plan, res, &events)
	for _, st := range out.Steps {
		if st.Started.IsZero() {
			continue
		}
		end := st.Finished
		if end.IsZero() {
			end = s.clock.Now()
		}
		ev := Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: st.Name, Start: st.Started, End: end,
			Outcome: string(st.State), Attempts: st.Attempts}
		if st.State == nodeexec.StepStateRolledBack && !st.RolledBack.IsZero() {
			// The run (the failed one, or a success undone), then, later,
			// its rollback.
			ev.Outcome = string(nodeexec.StepStateSucceeded)
			if out.Failure != nil && out.Failure.Step == st.Name && out.Failure.Phase == nodeexec.PhaseRun {
				ev.Outcome = string(nodeexec.StepStateFailed)
			}
			events = append(events, ev, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: st.Name,
				Start: st.RolledBack, End: st.RolledBack, Outcome: string(nodeexec.StepStateRolledBack)})
			continue
		}
		events = append(events, ev)
	}
	// In the order they ended: a failed step before the rollbacks it
	// caused, a crash where it happened among the steps.
	sort.SliceStable(events, func(i, j int) bool {
		if !events[i].End.Equal(events[j].End) {
			return events[i].End.Before(events[j].End)
		}
		return events[i].Start.Before(events[j].Start)
	})
	for _, e := range events {
		s.emit(res, e)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch {
	case out.State == nodeexec.PlanStateSucceeded && runErr == nil:
		if err := s.setMachineVersion(ctx, pm.Machine, r.ToVersion, "", false); err != nil {
			return err
		}
		return s.uncordon(ctx, pm.Node)
	case out.State == nodeexec.PlanStateRolledBack:
		// Back where it was and healthy: schedulable again, but failed.
		if err := s.uncordon(ctx, pm.Node); err != nil {
			return err
		}
	default:
		res.LeftCordoned = append(res.LeftCordoned, pm.Node)
	}
	if runErr != nil {
		return runErr
	}
	return fmt.Errorf("plan ended %s", out.State)
}

// runPlan runs plan on h through nodeexec's Runner, starting a new Runner
// on the same journal after each injected crash. The journal is the
// host's nodeexec.MemoryJournalStore: a Runner stops only between two of
// its writes here (an injected crash cancels its context), where the file
// store's atomic replace leaves the same journal.
// Restarts are appended to events, for the caller to emit in time order
// with the steps.
func (s *Simulator) runPlan(ctx context.Context, h *Host, pm strategy.PlannedMachine, b strategy.Batch, plan nodeexec.Plan, res *Result, events *[]Event) (nodeexec.Outcome, error) {
	for restarts := 0; ; restarts++ {
		rctx, cancel := context.WithCancel(ctx)
		crashed := false
		lastDone := "" // the last step whose run succeeded, for CrashPointAfter
		exec := nodeexec.ExecutorFunc(func(ctx context.Context, cmd nodeexec.Command) (nodeexec.Result, error) {
			rec := Execution{Machine: pm.Machine, Step: cmd.Step, Phase: cmd.Phase, At: s.clock.Now()}
			if s.faults != nil && lastDone != "" && cmd.Step != lastDone && s.faults.TakeCrash(h.node, lastDone, CrashPointAfter) {
				crashed, rec.Crashed, rec.ExitCode = true, true, -1
				res.Executions = append(res.Executions, rec)
				cancel()
				return nodeexec.Result{ExitCode: -1}, errCrashed
			}
			out, err := h.Run(ctx, cmd)
			s.clock.Step(s.stepTime)
			rec.ExitCode = out.ExitCode
			if err == nil && out.ExitCode == 0 && cmd.Phase == nodeexec.PhaseRun {
				lastDone = cmd.Step
				if s.faults != nil && s.faults.TakeCrash(h.node, cmd.Step, CrashPointDuring) {
					crashed, rec.Crashed = true, true
					res.Executions = append(res.Executions, rec)
					cancel()
					return out, errCrashed
				}
			}
			res.Executions = append(res.Executions, rec)
			return out, err
		})
		// Retry backoffs step the virtual clock instead of waiting.
		runner, err := nodeexec.NewRunner(exec, nodeexec.RunnerOptions{JournalStore: s.journalStore(h.node), Clock: SkipAheadClock{s.clock}})
		if err != nil {
			cancel()
			return nodeexec.Outcome{}, err
		}
		out, runErr := runner.Run(rctx, plan)
		cancel()
		if !crashed || ctx.Err() != nil {
			return out, runErr
		}
		at := s.clock.Now()
		*events = append(*events, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: "runner-restart", Start: at, End: at, Outcome: "Crashed"})
		if restarts >= s.maxRestarts {
			return out, fmt.Errorf("runner on %s crashed %d times", pm.Node, restarts+1)
		}
		res.Restarts++
	}
}

// journalStore returns the journals of node's in-place plans in this Run.
func (s *Simulator) journalStore(node string) *nodeexec.MemoryJournalStore {
	js := s.journals[node]
	if js == nil {
		js = &nodeexec.MemoryJournalStore{}
		s.journals[node] = js
	}
	return js
}

// cordon marks the node unschedulable with a nodeexec/drain cordon record
// owned by simulatorCordonOwner, keeping a record that is already ours
// (a resumed update).
func (s *Simulator) cordon(ctx context.Context, name string) error {
	return s.retry(func() error {
		var n corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		if raw, ok := n.Annotations[drain.AnnotationCordon]; ok {
			var rec drain.CordonRecord
			if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.Owner != simulatorCordonOwner {
				return fmt.Errorf("node %s is cordoned by someone else (%s=%q)", name, drain.AnnotationCordon, raw)
			}
			if n.Spec.Unschedulable {
				return nil
			}
		} else {
			raw, err := json.Marshal(drain.CordonRecord{Owner: simulatorCordonOwner, PriorUnschedulable: n.Spec.Unschedulable, Time: metav1.NewTime(s.clock.Now())})
			if err != nil {
				return err
			}
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[drain.AnnotationCordon] = string(raw)
		}
		n.Spec.Unschedulable = true
		return s.c.Update(ctx, &n)
	})
}

// uncordon lifts our cordon, unless the node was cordoned before we
// cordoned it; either way our record goes.
func (s *Simulator) uncordon(ctx context.Context, name string) error {
	return s.retry(func() error {
		var n corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		raw, ok := n.Annotations[drain.AnnotationCordon]
		if !ok {
			return nil
		}
		var rec drain.CordonRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.Owner != simulatorCordonOwner {
			return nil // not ours: leave it alone
		}
		delete(n.Annotations, drain.AnnotationCordon)
		if !rec.PriorUnschedulable {
			n.Spec.Unschedulable = false
		}
		return s.c.Update(ctx, &n)
	})
}

// simRetry retries immediately: time in a simulation is virtual, and a
// real backoff would only slow the run down.
var simRetry = wait.Backoff{Steps: 10}

// retry runs f again on conflicts, timeouts and throttling, which injected
// API faults produce.
func (s *Simulator) retry(f func() error) error {
	return retry.OnError(simRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
	}, f)
}

// replaceMachine swaps the machine for a new one at the desired version
// and image: provisioning, then draining and deleting the old one.
func (s *Simulator) replaceMachine(ctx context.Context, r Rollout, b strategy.Batch, pm strategy.PlannedMachine, res *Result) error {
	start := s.clock.Now()
	s.clock.Step(s.replace)
	s.emit(res, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: "provision-replacement", Start: start, End: s.clock.Now(), Outcome: "Succeeded"})
	start = s.clock.Now()
	s.clock.Step(s.replace / 4)
	s.emit(res, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: "drain-and-delete-old", Start: start, End: s.clock.Now(), Outcome: "Replaced"})
	if pm.Role == strategy.RoleControlPlane {
		// KubeadmControlPlane writes the new version into kubeadm-config
		// before it rolls a control plane machine, so the workers' `kubeadm
		// upgrade node` follows it, as after an in-place `upgrade apply`.
		s.fleet.state.set(r.ToVersion)
	}
	return s.setMachineVersion(ctx, pm.Machine, r.ToVersion, r.Images[pm.Group], true)
}

// setMachineVersion records the machine at its new version (and image);
// with node, its Node's kubelet version too (a replacement: in place, the
// host's kubelet restart has already reported it).
func (s *Simulator) setMachineVersion(ctx context.Context, name, v, image string, node bool) error {
	ns := s.cl.Namespace()
	err := s.retry(func() error {
		var m clusterv1.Machine
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &m); err != nil {
			return err
		}
		if m.Spec.Version == v {
			return nil
		}
		m.Spec.Version = v
		return s.c.Update(ctx, &m)
	})
	if err != nil {
		return err
	}
	if image != "" {
		if err := s.retry(func() error {
			infra := s.newInfra()
			if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, infra); err != nil {
				return err
			}
			if err := unstructured.SetNestedField(infra.Object, image, s.cl.infra.ImageField...); err != nil {
				return err
			}
			return s.c.Update(ctx, infra)
		}); err != nil {
			return err
		}
	}
	if !node {
		return nil
	}
	return s.retry(func() error {
		var node corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			return err
		}
		if node.Status.NodeInfo.KubeletVersion == v {
			return nil
		}
		node.Status.NodeInfo.KubeletVersion = v
		return s.c.Status().Update(ctx, &node)
	})
}

// markFailed records a machine's failed update on the Machine, where a
// controller planning again finds it.
func (s *Simulator) markFailed(ctx context.Context, name string, cause error) error {
	return s.retry(func() error {
		var m clusterv1.Machine
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.cl.Namespace(), Name: name}, &m); err != nil {
			return err
		}
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		msg := cause.Error()
		if len(msg) > 256 {
			msg = msg[:256]
		}
		m.Annotations[failedAnnotation] = msg
		return s.c.Update(ctx, &m)
	})
}

// checkConverged reports machines that ran (or that the last plan
// batched) and did not reach the version, failed ones aside, and batches
// that broke the control-plane-one-at-a-time rule.
func (s *Simulator) checkConverged(ctx context.Context, r Rollout, res *Result) []string {
	var out []string
	failed := map[string]bool{}
	for _, f := range res.Failed {
		failed[f] = true
	}
	for _, plan := range res.Plans {
		for _, b := range plan.Batches {
			if b.Phase == strategy.PhaseControlPlane && len(b.Machines) != 1 {
				out = append(out, fmt.Sprintf("batch %d holds %d control plane machines", b.Index, len(b.Machines)))
			}
		}
	}
	nodes := map[string]string{}
	var order []string
	add := func(machine, node string) {
		if _, seen := nodes[machine]; !seen {
			nodes[machine] = node
			order = append(order, machine)
		}
	}
	last := res.Plans[len(res.Plans)-1]
	for _, pm := range last.Machines {
		if pm.Batch > 0 {
			add(pm.Machine, pm.Node)
		}
	}
	all := map[string]string{}
	for _, plan := range res.Plans {
		for _, pm := range plan.Machines {
			all[pm.Machine] = pm.Node
		}
	}
	for _, e := range res.Events {
		add(e.Machine, all[e.Machine])
	}
	for _, h := range res.Held {
		failed[h.Machine] = true // not started: nothing to converge
	}
	for _, name := range order {
		if failed[name] {
			continue
		}
		var node corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: nodes[name]}, &node); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if got := node.Status.NodeInfo.KubeletVersion; got != r.ToVersion {
			out = append(out, fmt.Sprintf("%s: kubelet %s, want %s", name, got, r.ToVersion))
		}
	}
	return out
}
