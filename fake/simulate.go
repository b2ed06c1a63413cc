package fake

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/version"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
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
	// Outcome is Succeeded, Failed, RolledBack... (nodeexec step states) or
	// Replaced.
	Outcome string `json:"outcome"`
}

// Result is what a simulation did.
type Result struct {
	// Plan is the rollout plan that was executed.
	Plan *strategy.Plan `json:"plan"`
	// Events is the timeline, in the order things happened.
	Events []Event `json:"events"`
	// Start and End bound the rollout in virtual time.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Failed lists machines whose update failed.
	Failed []string `json:"failed,omitempty"`
	// Violations lists broken invariants (empty when all held).
	Violations []string `json:"violations,omitempty"`
}

// Simulator runs a rollout plan from package strategy over a fake cluster
// with simulated hosts, on a virtual clock: in-place machines run the real
// kubeadm plans through nodeexec's Runner against their Host, replaced
// machines are swapped for new ones at the desired version. Prefer
// fake/envtest when the test is about the API server itself.
type Simulator struct {
	cl       *Cluster
	c        client.WithWatch
	fleet    *Fleet
	clock    *clocktesting.FakeClock
	planner  *strategy.Planner
	stepTime time.Duration
	replace  time.Duration
	gate     time.Duration
	journal  string
	faults   *Faults
	onEvent  func(Event)
}

// SimOption configures a Simulator.
type SimOption func(*Simulator)

// WithPlanner sets the planner (default: in place for Kubernetes version,
// etcd and kubeadm/kubelet configuration changes, else rolling replace).
func WithPlanner(p *strategy.Planner) SimOption { return func(s *Simulator) { s.planner = p } }

// WithStepTime sets the virtual time each host command takes (default 20s).
func WithStepTime(d time.Duration) SimOption { return func(s *Simulator) { s.stepTime = d } }

// WithSimFaults injects host and API faults.
func WithSimFaults(f *Faults) SimOption { return func(s *Simulator) { s.faults = f } }

// WithEvents calls f for every timeline event as it completes (live
// progress).
func WithEvents(f func(Event)) SimOption { return func(s *Simulator) { s.onEvent = f } }

// NewSimulator builds the fake cluster's client and hosts. The clock starts
// at a fixed time, so timelines are reproducible.
func NewSimulator(cl *Cluster, opts ...SimOption) (*Simulator, error) {
	s := &Simulator{cl: cl, stepTime: 20 * time.Second, replace: 4 * time.Minute, gate: time.Minute,
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))}
	for _, o := range opts {
		o(s)
	}
	var copts []ClientOption
	if s.faults != nil {
		copts = append(copts, WithInterceptor(s.faults.Interceptor()))
	}
	c, err := cl.Client(copts...)
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
	if s.planner == nil {
		kubeadmUpdater, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
		if err != nil {
			return nil, err
		}
		rolling, err := strategy.RollingReplaceStrategy(strategy.RollingUpdate{})
		if err != nil {
			return nil, err
		}
		fallback, err := strategy.FallbackStrategy(rolling)
		if err != nil {
			return nil, err
		}
		if s.planner, err = strategy.NewPlanner(strategy.WithDecider(strategy.Updaters(kubeadmUpdater)),
			strategy.WithStrategy(fallback), strategy.WithClock(s.clock)); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Client is the fake cluster's client.
func (s *Simulator) Client() client.Client { return s.c }

// Fleet is the cluster's simulated hosts.
func (s *Simulator) Fleet() *Fleet { return s.fleet }

// Input builds the planner's view of the cluster for a rollout: every
// machine with its diff against the desired state.
func (s *Simulator) Input(ctx context.Context, r Rollout) (strategy.Cluster, error) {
	if _, err := version.ParseSemantic(r.ToVersion); err != nil {
		return strategy.Cluster{}, fmt.Errorf("%w: rollout version %q: %v", ErrInvalidCluster, r.ToVersion, err)
	}
	in := strategy.Cluster{Name: s.cl.Name(), TargetVersion: r.ToVersion}
	groups := map[string]int{}
	for _, n := range s.cl.Nodes() {
		m, err := s.machine(ctx, n, r)
		if err != nil {
			return in, err
		}
		if n.Role == RoleControlPlane {
			in.ControlPlane = append(in.ControlPlane, m)
			continue
		}
		i, ok := groups[n.Pool]
		if !ok {
			i = len(in.Workers)
			groups[n.Pool] = i
			in.Workers = append(in.Workers, strategy.Group{Name: n.Pool})
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
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(s.cl.infra.APIVersion)
	infra.SetKind(s.cl.infra.Kind)
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
	cs, err := diff.Machines(diff.State{Machine: &m, Infrastructure: infra}, diff.State{Machine: desired, Infrastructure: desiredInfra}, diff.InPlaceUpdate())
	if err != nil {
		return strategy.Machine{}, err
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	return strategy.Machine{Name: n.Name, NodeName: n.Name, Version: node.Status.NodeInfo.KubeletVersion, Ready: ready,
		Created: m.CreationTimestamp.Time, Changes: cs}, nil
}

// Preview plans the rollout without running it.
func (s *Simulator) Preview(ctx context.Context, r Rollout) (*strategy.Plan, error) {
	in, err := s.Input(ctx, r)
	if err != nil {
		return nil, err
	}
	return s.planner.Preview(ctx, in)
}

// Run plans the rollout and executes it batch by batch. Machines of one
// batch run side by side in virtual time; a health gate waits a minute.
func (s *Simulator) Run(ctx context.Context, r Rollout) (*Result, error) {
	plan, err := s.Preview(ctx, r)
	if err != nil {
		return nil, err
	}
	// The journal is fsynced at every step; on tmpfs that costs nothing,
	// and a simulation has no crash to survive.
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
	res := &Result{Plan: plan, Start: s.clock.Now()}
	byName := map[string]strategy.PlannedMachine{}
	for _, pm := range plan.Machines {
		byName[pm.Machine] = pm
	}
	for _, b := range plan.Batches {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		start := s.clock.Now()
		end := start
		for _, name := range b.Machines {
			s.clock.SetTime(start)
			pm := byName[name]
			if err := s.runMachine(ctx, r, b, pm, res); err != nil {
				res.Failed = append(res.Failed, name)
			}
			if now := s.clock.Now(); now.After(end) {
				end = now
			}
		}
		s.clock.SetTime(end)
		if b.HealthGate {
			s.clock.Step(s.gate)
		}
		res.Violations = append(res.Violations, s.checkSkew(ctx, b.Index)...)
	}
	res.End = s.clock.Now()
	res.Violations = append(res.Violations, s.checkConverged(ctx, plan, r, res)...)
	return res, nil
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
		return s.inPlace(ctx, r, b, pm, res)
	case strategy.MethodReplace, strategy.MethodReplaceFirst:
		return s.replaceMachine(ctx, r, b, pm, res)
	}
	return nil
}

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
	h.Stage(Staging{Kubernetes: r.ToVersion, Containerd: DefaultContainerdVersion, CNI: DefaultCNIVersion})
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: pm.Node, Role: role, FromVersion: pm.FromVersion, ToVersion: r.ToVersion})
	if err != nil {
		s.emit(res, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: "plan", Start: s.clock.Now(), End: s.clock.Now(), Outcome: "Failed"})
		return err
	}
	exec := nodeexec.ExecutorFunc(func(ctx context.Context, cmd nodeexec.Command) (nodeexec.Result, error) {
		out, err := h.Run(ctx, cmd)
		s.clock.Step(s.stepTime)
		return out, err
	})
	runner, err := nodeexec.NewRunner(exec, nodeexec.WithJournalDir(s.journal), nodeexec.WithClock(s.clock))
	if err != nil {
		return err
	}
	// Retry backoffs wait on the virtual clock: keep it moving.
	stop := DriveClock(s.clock, time.Second)
	out, runErr := runner.Run(ctx, plan)
	stop()
	steps := append([]nodeexec.StepRecord(nil), out.Steps...)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Started.Before(steps[j].Started) })
	for _, st := range steps {
		if st.Started.IsZero() {
			continue
		}
		end := st.Finished
		if end.IsZero() {
			end = s.clock.Now()
		}
		s.emit(res, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: st.Name, Start: st.Started, End: end, Outcome: string(st.State)})
	}
	if runErr != nil {
		return runErr
	}
	if out.State != nodeexec.PlanSucceeded {
		return fmt.Errorf("plan ended %s", out.State)
	}
	return s.setMachineVersion(ctx, pm.Machine, r.ToVersion, "", "")
}

// replaceMachine swaps the machine for a new one at the desired version
// and image: provisioning, then draining and deleting the old one.
func (s *Simulator) replaceMachine(ctx context.Context, r Rollout, b strategy.Batch, pm strategy.PlannedMachine, res *Result) error {
	pool := pm.Group
	start := s.clock.Now()
	s.clock.Step(s.replace)
	s.emit(res, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: "provision-replacement", Start: start, End: s.clock.Now(), Outcome: "Succeeded"})
	start = s.clock.Now()
	s.clock.Step(s.replace / 4)
	s.emit(res, Event{Machine: pm.Machine, Batch: b.Index, Method: pm.Method, Step: "drain-and-delete-old", Start: start, End: s.clock.Now(), Outcome: "Replaced"})
	return s.setMachineVersion(ctx, pm.Machine, r.ToVersion, pool, r.Images[pool])
}

// setMachineVersion records the machine at its new version (and image).
func (s *Simulator) setMachineVersion(ctx context.Context, name, v, _ string, image string) error {
	ns := s.cl.Namespace()
	var m clusterv1.Machine
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &m); err != nil {
		return err
	}
	m.Spec.Version = v
	if err := s.c.Update(ctx, &m); err != nil {
		return err
	}
	if image != "" {
		infra := &unstructured.Unstructured{}
		infra.SetAPIVersion(s.cl.infra.APIVersion)
		infra.SetKind(s.cl.infra.Kind)
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, infra); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(infra.Object, image, s.cl.infra.ImageField...); err != nil {
			return err
		}
		if err := s.c.Update(ctx, infra); err != nil {
			return err
		}
	}
	var node corev1.Node
	if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return err
	}
	if node.Status.NodeInfo.KubeletVersion != v {
		node.Status.NodeInfo.KubeletVersion = v
		return s.c.Status().Update(ctx, &node)
	}
	return nil
}

// checkSkew reports workers whose kubelet is newer than the oldest control
// plane kubelet, after each batch.
func (s *Simulator) checkSkew(ctx context.Context, batch int) []string {
	var nodes corev1.NodeList
	if err := s.c.List(ctx, &nodes); err != nil {
		return []string{fmt.Sprintf("batch %d: listing nodes: %v", batch, err)}
	}
	var oldestCP *version.Version
	roles := map[string]Role{}
	for _, n := range s.cl.Nodes() {
		roles[n.Name] = n.Role
	}
	for _, n := range nodes.Items {
		v, err := version.ParseSemantic(n.Status.NodeInfo.KubeletVersion)
		if err != nil || roles[n.Name] != RoleControlPlane {
			continue
		}
		if oldestCP == nil || v.LessThan(oldestCP) {
			oldestCP = v
		}
	}
	var out []string
	for _, n := range nodes.Items {
		v, err := version.ParseSemantic(n.Status.NodeInfo.KubeletVersion)
		if err != nil || roles[n.Name] != RoleWorker || oldestCP == nil {
			continue
		}
		if v.Major() > oldestCP.Major() || (v.Major() == oldestCP.Major() && v.Minor() > oldestCP.Minor()) {
			out = append(out, fmt.Sprintf("after batch %d: worker %s runs %s, newer than control plane %s", batch, n.Name, v, oldestCP))
		}
	}
	return out
}

// checkConverged reports machines that should have reached the version but
// did not, and batches that broke the control-plane-one-at-a-time rule.
func (s *Simulator) checkConverged(ctx context.Context, plan *strategy.Plan, r Rollout, res *Result) []string {
	var out []string
	failed := map[string]bool{}
	for _, f := range res.Failed {
		failed[f] = true
	}
	for _, b := range plan.Batches {
		if b.Phase == strategy.PhaseControlPlane && len(b.Machines) != 1 {
			out = append(out, fmt.Sprintf("batch %d holds %d control plane machines", b.Index, len(b.Machines)))
		}
	}
	for _, pm := range plan.Machines {
		if pm.Batch == 0 || failed[pm.Machine] {
			continue
		}
		var node corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: pm.Node}, &node); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", pm.Machine, err))
			continue
		}
		if got := node.Status.NodeInfo.KubeletVersion; got != r.ToVersion {
			out = append(out, fmt.Sprintf("%s: kubelet %s, want %s", pm.Machine, got, r.ToVersion))
		}
	}
	return out
}
