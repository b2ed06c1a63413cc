package strategy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/clock"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// DoNotDisruptAnnotation on a machine or its node keeps the planner from
// disrupting it, as Karpenter's annotation of the same name does.
const DoNotDisruptAnnotation = "karpenter.sh/do-not-disrupt"

// Role is a machine's place in the cluster.
type Role string

const (
	// RoleControlPlane is a control plane machine.
	RoleControlPlane Role = "ControlPlane"
	// RoleWorker is a worker machine in a group.
	RoleWorker Role = "Worker"
)

// Machine is what the planner knows about one machine. Give either Changes
// (decided by the planner's Decider) or a Decision, not both.
type Machine struct {
	// Name is the machine's name, unique in the cluster.
	Name string `json:"name"`
	// NodeName is its node's name, if it has joined.
	NodeName string `json:"nodeName,omitempty"`
	// Version is the kubelet's Kubernetes version now ("v1.31.2"); empty
	// when unknown (no version skew check then).
	Version string `json:"version,omitempty"`
	// Created orders machines: older ones go first.
	Created time.Time `json:"created,omitzero"`
	// Ready is the node's Ready condition.
	Ready bool `json:"ready"`
	// Empty means the node runs no workload pods (daemon sets aside).
	Empty bool `json:"empty,omitempty"`
	// Annotations are the machine's annotations.
	Annotations map[string]string `json:"annotations,omitempty"`
	// NodeAnnotations are the node's annotations.
	NodeAnnotations map[string]string `json:"nodeAnnotations,omitempty"`
	// PDBBlocked means a PodDisruptionBudget forbids evicting a pod on the
	// node now.
	PDBBlocked bool `json:"pdbBlocked,omitempty"`
	// Failed means an earlier update of this machine failed; failures feed
	// the circuit breaker.
	Failed bool `json:"failed,omitempty"`
	// Changes is what differs from the desired state (from diff.Machines).
	Changes diff.ChangeSet `json:"-"`
	// Decision, when set, is used instead of deciding Changes.
	Decision *Decision `json:"-"`
}

// Group is a set of worker machines rolled out together: a
// MachineDeployment, a Karpenter NodePool.
type Group struct {
	// Name is the group's name, unique in the cluster.
	Name string `json:"name"`
	// Machines are the group's machines.
	Machines []Machine `json:"machines"`
	// Rollout limits surge and unavailability (CAPI defaults when nil).
	Rollout RollingUpdate `json:"rollout"`
	// Budgets limit disruptions by reason, in cron windows.
	Budgets []Budget `json:"budgets,omitempty"`
	// Strategy overrides the planner's strategy for this group.
	Strategy Strategy `json:"-"`
}

// Cluster is the planner's input: the whole cluster as it is now.
type Cluster struct {
	// Name names the cluster in the plan.
	Name string `json:"name"`
	// TargetVersion is the desired Kubernetes version; empty when the
	// rollout does not change versions (no skew checks then).
	TargetVersion string `json:"targetVersion,omitempty"`
	// ControlPlane lists the control plane machines.
	ControlPlane []Machine `json:"controlPlane"`
	// Workers lists the worker groups, planned in this order.
	Workers []Group `json:"workers"`
}

// Phase is the part of a rollout a batch belongs to.
type Phase string

const (
	// PhaseControlPlane batches hold one control plane machine each.
	PhaseControlPlane Phase = "ControlPlane"
	// PhaseWorkers batches hold machines of one worker group.
	PhaseWorkers Phase = "Workers"
)

// Batch is a set of machines disrupted together.
type Batch struct {
	// Index is the batch's 1-based position in the plan.
	Index int `json:"index"`
	// Phase is ControlPlane or Workers.
	Phase Phase `json:"phase"`
	// Group is the worker group ("" for the control plane).
	Group string `json:"group,omitempty"`
	// Machines are the machine names, in order.
	Machines []string `json:"machines"`
	// Canary marks the first worker batch when the planner has a canary
	// size.
	Canary bool `json:"canary,omitempty"`
	// HealthGate means: wait until the cluster is healthy before the next
	// batch (after each control plane machine and after the canary).
	HealthGate bool `json:"healthGate,omitempty"`
}

// PlannedMachine is the plan for one machine: its method, why, and which
// batch (0 when it is in none).
type PlannedMachine struct {
	// Machine is the machine's name.
	Machine string `json:"machine"`
	// Node is its node's name.
	Node string `json:"node,omitempty"`
	// Role is ControlPlane or Worker.
	Role Role `json:"role"`
	// Group is the worker group ("" for the control plane).
	Group string `json:"group,omitempty"`
	// Method is what happens to it.
	Method Method `json:"method"`
	// Strategy names the strategy that chose the method.
	Strategy string `json:"strategy,omitempty"`
	// Reason says why.
	Reason string `json:"reason"`
	// Disruption is the budget reason the machine counts under.
	Disruption Reason `json:"disruption,omitempty"`
	// Batch is the 1-based batch index, 0 when not in a batch.
	Batch int `json:"batch"`
	// Outcome is the decision's outcome.
	Outcome Outcome `json:"outcome"`
	// InPlaceFields are the fields changed in place.
	InPlaceFields []string `json:"inPlaceFields,omitempty"`
	// UncoveredFields are the fields that cannot change in place.
	UncoveredFields []string `json:"uncoveredFields,omitempty"`
	// FromVersion and ToVersion are the kubelet versions before and after.
	FromVersion string `json:"fromVersion,omitempty"`
	// ToVersion is the kubelet version after the machine is done.
	ToVersion string `json:"toVersion,omitempty"`
	// Err, for Blocked machines, is the typed cause (ErrVersionSkew,
	// ErrInvalidBudget...), when there is one.
	Err error `json:"-"`
}

// Warning is a problem the plan worked around, failing closed.
type Warning struct {
	// Field names the offending input ("workers[md-0].budgets[1]").
	Field string `json:"field"`
	// Message describes it.
	Message string `json:"message"`
	// Err is the typed error (errors.Is against ErrInvalidBudget...).
	Err error `json:"-"`
}

// Unwrap returns Err, so errors.Is works on a Warning.
func (w Warning) Unwrap() error { return w.Err }

// Error renders the warning.
func (w Warning) Error() string { return w.Field + ": " + w.Message }

// RolloutPlan is an ordered rollout: batches, and every machine's part in it.
type RolloutPlan struct {
	// Cluster is the cluster's name.
	Cluster string `json:"cluster"`
	// At is the planner clock's time, when budgets were evaluated.
	At time.Time `json:"at"`
	// Batches run in order.
	Batches []Batch `json:"batches"`
	// Machines lists every machine once: batched ones in batch order, then
	// the others in input order.
	Machines []PlannedMachine `json:"machines"`
	// Warnings are problems worked around (malformed budgets count as 0).
	Warnings []Warning `json:"warnings,omitempty"`
	// CircuitOpen is set when failures reached the planner's limit and no
	// batch was planned.
	CircuitOpen bool `json:"circuitOpen,omitempty"`
}

// Planner turns a Cluster into a RolloutPlan. Build it with NewPlanner; it is safe
// for concurrent use.
type Planner struct {
	strategy    Strategy
	decider     Decider
	clock       clock.PassiveClock
	canary      int
	maxFailures int
	// copyDecisions, a test hook, makes Plan decide every machine with
	// Decide (a Decision of its own) even when it could use scratch.
	copyDecisions bool
}

// PlannerOptions configure NewPlanner. The zero value of every field is
// its default.
type PlannerOptions struct {
	// Strategy is the default strategy, for machines whose group names
	// none (default: Strategies{InPlaceStrategy(), rolling replace}).
	Strategy Strategy
	// Decider decides machines given as Changes (default: no updaters, so
	// every change means Replace).
	Decider Decider
	// Clock is the clock budgets are evaluated at (default: real time).
	Clock clock.PassiveClock
	// Canary limits the first worker batch to this many machines and puts
	// a health gate after it (default 0: no canary; must not be
	// negative).
	Canary int
	// MaxFailures opens the circuit breaker once this many machines have
	// failed: no batch is planned then (default 0: no breaker; must not be
	// negative).
	MaxFailures int
}

// NewPlanner builds a planner. A negative Canary or MaxFailures is
// ErrInvalidStrategy, naming the field.
func NewPlanner(opts PlannerOptions) (*Planner, error) {
	switch {
	case opts.Canary < 0:
		return nil, fmt.Errorf("%w: PlannerOptions.Canary: %d is negative", ErrInvalidStrategy, opts.Canary)
	case opts.MaxFailures < 0:
		return nil, fmt.Errorf("%w: PlannerOptions.MaxFailures: %d is negative", ErrInvalidStrategy, opts.MaxFailures)
	}
	p := &Planner{strategy: opts.Strategy, decider: opts.Decider, clock: opts.Clock, canary: opts.Canary, maxFailures: opts.MaxFailures}
	if p.strategy == nil {
		rolling, _ := RollingReplaceStrategy(RollingUpdate{})
		p.strategy = Strategies{InPlaceStrategy(), rolling}
	}
	if p.decider == nil {
		p.decider = Updaters()
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	return p, nil
}

// work is a machine on its way through planning. A plan holds one per
// machine: the small fields are int32 (a cluster has far fewer than 2^31
// machines or groups).
type work struct {
	m     *Machine
	pm    *PlannedMachine // the machine's entry in RolloutPlan.Machines
	ver   *version.Version
	group int32 // -1 for the control plane
	rank  int32 // sort rank: unhealthy, empty, the rest
	pos   int32 // position in its batch
}

// field names the machine in the input, for error messages.
func (w *work) field(c *Cluster) string {
	if w.group < 0 {
		return "controlPlane[" + w.m.Name + "]"
	}
	return "workers[" + c.Workers[w.group].Name + "].machines[" + w.m.Name + "]"
}

func (w *work) disrupts() bool {
	switch w.pm.Method {
	case MethodInPlace, MethodReplace, MethodReplaceFirst:
		return true
	}
	return false
}

func (w *work) changesVersion() bool { return w.pm.FromVersion != w.pm.ToVersion }

func (w *work) set(m Method, reason string, err error) {
	w.pm.Method, w.pm.Reason, w.pm.Err = m, reason, err
}

// Plan plans the rollout of c. Input that cannot be planned is an
// ErrInvalidCluster naming the field; problems the plan works around
// (malformed budgets) are Warnings.
//
// The rules, in order: each machine's Decision (given, or from the
// Decider) goes through the group's or the planner's Strategy. Failed
// machines, and everything once the circuit breaker is open, are skipped;
// so are machines or nodes annotated do-not-disrupt and nodes a
// PodDisruptionBudget pins. Version skew is checked next (see ErrVersionSkew).
// Control plane machines then get one batch each, with a health gate after
// each. Worker groups follow, in input order, each in batches ordered
// unhealthy first, then empty, then oldest, then by name: in-place updates
// use maxUnavailable (with maxUnavailable 0, one at a time covered by a
// surge machine, as CAPI does), replacements use maxSurge then
// maxUnavailable, replace-first uses maxSurge (at least one), and every
// active budget that covers a machine's reason caps the batch. A budget
// that allows 0 skips the machines it covers. Machines already unavailable
// or being disrupted before the plan are not counted against the limits.
func (p *Planner) Plan(ctx context.Context, c Cluster) (*RolloutPlan, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil planner", ErrInvalidStrategy)
	}
	if p.strategy == nil || p.decider == nil || p.clock == nil {
		return nil, fmt.Errorf("%w: Planner not constructed with NewPlanner", ErrInvalidStrategy)
	}
	plan := &RolloutPlan{Cluster: c.Name, At: p.clock.Now().UTC()}
	target, err := parseVersion("targetVersion", c.TargetVersion)
	if err != nil {
		return nil, err
	}
	n := len(c.ControlPlane)
	for gi := range c.Workers {
		n += len(c.Workers[gi].Machines)
	}
	// One allocation for every machine's work, in input order (the order
	// of plan.Machines); workers are added group by group, so group gi's
	// machines are all[groupStart[gi]:groupStart[gi+1]].
	all := make([]work, 0, n)
	// RolloutPlan.Machines is filled in input order and put in report order at
	// the end.
	plan.Machines = make([]PlannedMachine, n)
	groupStart := make([]int, len(c.Workers)+1)
	names := make(map[string]int, n)          // name -> index in all
	versions := map[string]*version.Version{} // a cluster has few distinct versions; parse each once
	limits := make([][2]int, len(c.Workers))
	add := func(m *Machine, role Role, group int, groupName string) error {
		i := len(all)
		all = append(all, work{m: m, group: int32(group), pm: &plan.Machines[i]})
		w := &all[i]
		if m.Name == "" {
			field := "controlPlane"
			if group >= 0 {
				field = "workers[" + groupName + "].machines"
			}
			return fmt.Errorf("%w: %s.name: empty", ErrInvalidCluster, field)
		}
		if prev, dup := names[m.Name]; dup {
			return fmt.Errorf("%w: %s: name also used by %s", ErrInvalidCluster, w.field(&c), all[prev].field(&c))
		}
		names[m.Name] = i
		v, seen := versions[m.Version]
		if !seen {
			var err error
			if v, err = parseVersion(w.field(&c)+".version", m.Version); err != nil {
				return err
			}
			versions[m.Version] = v
		}
		if v != nil && target != nil && v.GreaterThan(target) {
			return fmt.Errorf("%w: %s.version: %s is newer than targetVersion %s (downgrades are not planned)", ErrInvalidCluster, w.field(&c), m.Version, c.TargetVersion)
		}
		w.ver, w.rank = v, sortRank(m)
		*w.pm = PlannedMachine{
			Machine: m.Name, Node: m.NodeName, Role: role, Group: groupName,
			FromVersion: m.Version, ToVersion: m.Version, Disruption: disruptionOf(m),
		}
		if v != nil && target != nil && !v.EqualTo(target) {
			w.pm.ToVersion = c.TargetVersion
		}
		return nil
	}
	for i := range c.ControlPlane {
		if err := add(&c.ControlPlane[i], RoleControlPlane, -1, ""); err != nil {
			return nil, err
		}
	}
	groupNames := make(map[string]bool, len(c.Workers))
	for gi := range c.Workers {
		g := &c.Workers[gi]
		if g.Name == "" || groupNames[g.Name] {
			return nil, fmt.Errorf("%w: workers[%d].name: %q is empty or used twice", ErrInvalidCluster, gi, g.Name)
		}
		groupNames[g.Name] = true
		s, u, err := g.Rollout.Limits(len(g.Machines))
		if err != nil {
			return nil, fmt.Errorf("%w: workers[%s].rollout: %w", ErrInvalidCluster, g.Name, err)
		}
		limits[gi] = [2]int{s, u}
		groupStart[gi] = len(all)
		for i := range g.Machines {
			if err := add(&g.Machines[i], RoleWorker, gi, g.Name); err != nil {
				return nil, err
			}
		}
	}
	groupStart[len(c.Workers)] = len(all)

	// Decide and choose. A built-in decider builds the Decision of a
	// machine whose strategy is built in into buffers reused from machine
	// to machine: nothing keeps the Decision past Choose (scratchSafe), so
	// only user code needs one of its own. The buffers are this call's.
	var sd scratchDecider
	if !p.copyDecisions {
		sd, _ = p.decider.(scratchDecider)
	}
	var dsc *decideScratch
	planSafe := false
	groupSafe := make([]bool, len(c.Workers))
	if sd != nil {
		dsc = new(decideScratch)
		planSafe = scratchSafe(p.strategy, 0)
		for gi := range c.Workers {
			if s := c.Workers[gi].Strategy; s != nil {
				groupSafe[gi] = scratchSafe(s, 0)
			} else {
				groupSafe[gi] = planSafe
			}
		}
	}
	failures := 0
	for i := range all {
		w := &all[i]
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s, safe := p.strategy, planSafe
		if w.group >= 0 {
			safe = groupSafe[w.group]
			if gs := c.Workers[w.group].Strategy; gs != nil {
				s = gs
			}
		}
		var sc *decideScratch
		if safe {
			sc = dsc
		}
		if err := p.choose(ctx, &c, w, s, sd, sc); err != nil {
			return nil, err
		}
		if w.m.Failed {
			failures++
		}
	}
	open := p.maxFailures > 0 && failures >= p.maxFailures
	plan.CircuitOpen = open
	var openReason string
	if open {
		openReason = fmt.Sprintf("circuit breaker open: %d machines failed (limit %d)", failures, p.maxFailures)
	}
	for i := range all {
		switch w := &all[i]; {
		case !w.disrupts():
		case w.m.Failed:
			w.set(MethodSkip, "an earlier update failed; needs attention before it is tried again", nil)
		case open:
			w.set(MethodSkip, openReason, nil)
		case w.m.Annotations[DoNotDisruptAnnotation] == "true":
			w.set(MethodSkip, "machine has "+DoNotDisruptAnnotation, nil)
		case w.m.NodeAnnotations[DoNotDisruptAnnotation] == "true":
			w.set(MethodSkip, "node has "+DoNotDisruptAnnotation, nil)
		case w.m.PDBBlocked:
			w.set(MethodSkip, "a PodDisruptionBudget forbids draining the node now", nil)
		}
	}
	p.checkSkew(all, target)

	// Control plane: one machine per batch, each followed by a health gate.
	var cp []*work
	for i := range all[:groupStart[0]] {
		if w := &all[i]; w.disrupts() {
			cp = append(cp, w)
		}
	}
	sortWork(cp)
	scratch := groupScratch{names: make([]string, 0, len(all))}
	for _, w := range cp {
		scratch.names = append(scratch.names, w.pm.Machine)
		k := len(scratch.names)
		plan.Batches = append(plan.Batches, Batch{Index: len(plan.Batches) + 1, Phase: PhaseControlPlane, Machines: scratch.names[k-1 : k : k], HealthGate: true})
		w.pm.Batch = len(plan.Batches)
	}

	canary := p.canary
	for gi := range c.Workers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p.planGroup(plan, &c.Workers[gi], limits[gi], all[groupStart[gi]:groupStart[gi+1]], &canary, &scratch)
	}

	// Report: batched machines in batch order, then the rest in input
	// order. A batched machine's place is its batch's offset plus its
	// position in the batch; the entries are moved there in place.
	offset := make([]int, len(plan.Batches)+1)
	for i, b := range plan.Batches {
		offset[i+1] = offset[i] + len(b.Machines)
	}
	src := make([]int, len(all)) // src[k]: the input index of the entry that goes to k
	rest := offset[len(plan.Batches)]
	for i := range all {
		w := &all[i]
		if !w.disrupts() {
			w.pm.ToVersion = w.pm.FromVersion
		}
		if w.pm.Batch > 0 {
			src[offset[w.pm.Batch-1]+int(w.pos)] = i
		} else {
			src[rest] = i
			rest++
		}
	}
	// Follow each cycle of the permutation, moving every entry once.
	ms := plan.Machines
	for i := range ms {
		if src[i] < 0 || src[i] == i {
			continue
		}
		tmp, k := ms[i], i
		for {
			s := src[k]
			src[k] = -1
			if s == i {
				ms[k] = tmp
				break
			}
			ms[k], k = ms[s], s
		}
	}
	return plan, nil
}

// choose decides w's machine (unless its Decision is given) and has s
// choose its method. With sc non-nil, sd (p.decider) builds the Decision
// in sc: s must then be scratchSafe.
func (p *Planner) choose(ctx context.Context, c *Cluster, w *work, s Strategy, sd scratchDecider, sc *decideScratch) error {
	m := w.m
	var d Decision
	switch {
	case m.Decision != nil && !m.Changes.Empty():
		return fmt.Errorf("%w: %s: both changes and a decision given", ErrInvalidCluster, w.pm.Machine)
	case m.Decision != nil:
		d = *m.Decision
	default:
		var err error
		if sc != nil {
			d, err = sd.decideInto(ctx, m.Changes, sc)
		} else {
			d, err = p.decider.Decide(ctx, m.Changes)
		}
		if err != nil {
			return fmt.Errorf("deciding %s: %w", w.pm.Machine, err)
		}
	}
	if w.changesVersion() && (d.Outcome == OutcomeNoChange || d.Outcome == "") {
		return fmt.Errorf("%w: %s: version %s differs from targetVersion %s but the decision has no changes", ErrInvalidCluster, w.pm.Machine, m.Version, c.TargetVersion)
	}
	w.pm.Outcome = d.Outcome
	if w.pm.Outcome == "" {
		w.pm.Outcome = OutcomeNoChange
	}
	w.pm.InPlaceFields, w.pm.UncoveredFields = fields(d.InPlace, d.Uncovered)
	ch, ok := s.Choose(d)
	if !ok {
		ch = Choice{Method: MethodBlocked, Strategy: s.Name(), Reason: fmt.Sprintf("strategy %s does not handle a %s decision", s.Name(), d.Outcome)}
	}
	w.pm.Method, w.pm.Strategy, w.pm.Reason = ch.Method, ch.Strategy, ch.Reason
	return nil
}

// checkSkew blocks upgrades that would break the version skew policy: the
// control plane moves one minor at a time and never leaves a kubelet more
// than three minors behind; a kubelet never gets newer than the oldest API
// server the control plane will have; kubeadm cannot skip a minor in place.
func (p *Planner) checkSkew(all []work, target *version.Version) {
	if target == nil {
		return
	}
	var oldestKubelet *work
	for i := range all {
		if w := &all[i]; w.group >= 0 && w.ver != nil && (oldestKubelet == nil || w.ver.LessThan(oldestKubelet.ver)) {
			oldestKubelet = w
		}
	}
	var api *version.Version // the oldest API server once the plan has run
	for i := range all {
		w := &all[i]
		if w.group >= 0 || w.ver == nil {
			continue
		}
		if w.disrupts() && w.changesVersion() {
			switch {
			case w.ver.Major() != target.Major() || target.Minor() > w.ver.Minor()+1:
				w.set(MethodBlocked, fmt.Sprintf("control plane %s -> %s skips a minor version", w.pm.FromVersion, w.pm.ToVersion), ErrVersionSkew)
			case oldestKubelet != nil && oldestKubelet.ver.Minor()+3 < target.Minor():
				w.set(MethodBlocked, fmt.Sprintf("kubelet on %s (%s) would be more than 3 minors behind API server %s", oldestKubelet.pm.Machine, oldestKubelet.pm.FromVersion, w.pm.ToVersion), ErrVersionSkew)
			}
		}
		after := w.ver
		if w.disrupts() && w.changesVersion() {
			after = target
		}
		if api == nil || after.LessThan(api) {
			api = after
		}
	}
	for i := range all {
		w := &all[i]
		if w.group < 0 || w.ver == nil || !w.disrupts() || !w.changesVersion() {
			continue
		}
		switch {
		case api != nil && target.GreaterThan(api):
			w.set(MethodBlocked, fmt.Sprintf("kubelet %s would be newer than API server %s", w.pm.ToVersion, "v"+api.String()), ErrVersionSkew)
		case w.pm.Method == MethodInPlace && (w.ver.Major() != target.Major() || target.Minor() > w.ver.Minor()+1):
			w.set(MethodBlocked, fmt.Sprintf("in-place %s -> %s skips a minor version", w.pm.FromVersion, w.pm.ToVersion), ErrVersionSkew)
		}
	}
}

// groupScratch holds buffers planGroup reuses from group to group.
type groupScratch struct {
	todo, rest []*work
	used       []int
	// names holds every batch's machine names, one plan-wide array (a
	// machine is in one batch at most); each batch's Machines is its
	// capped part.
	names []string
}

// planGroup batches one worker group (its machines are ws) under its
// rollout limits and budgets.
func (p *Planner) planGroup(plan *RolloutPlan, g *Group, lim [2]int, ws []work, canary *int, sc *groupScratch) {
	surge, unavail := lim[0], lim[1]
	size := len(g.Machines)
	// Budgets: which are malformed (warned, count 0) and what each allows.
	allowed := make([]int, len(g.Budgets))
	for i, b := range g.Budgets {
		n, err := b.Allowed(p.clock, size)
		if err != nil {
			field := fmt.Sprintf("workers[%s].budgets[%d]", g.Name, i)
			plan.Warnings = append(plan.Warnings, Warning{Field: field, Message: err.Error() + "; allowing no disruption", Err: err})
		}
		allowed[i] = n
	}
	todo := sc.todo[:0]
	for k := range ws {
		w := &ws[k]
		if !w.disrupts() {
			continue
		}
		if i := zeroBudget(g.Budgets, allowed, w.pm.Disruption); i >= 0 {
			msg := fmt.Sprintf("disruption budget workers[%s].budgets[%d] allows no %s disruption now", g.Name, i, w.pm.Disruption)
			var err error
			if g.Budgets[i].Validate() != nil {
				err = ErrInvalidBudget
			}
			w.set(MethodSkip, msg, err)
			continue
		}
		todo = append(todo, w)
	}
	sortWork(todo)
	rest := sc.rest[:0]
	if cap(sc.used) < len(g.Budgets) {
		sc.used = make([]int, len(g.Budgets))
	}
	used := sc.used[:len(g.Budgets)]
	for len(todo) > 0 {
		b := Batch{Index: len(plan.Batches) + 1, Phase: PhaseWorkers, Group: g.Name}
		capN := unlimited
		if *canary > 0 {
			capN, b.Canary, b.HealthGate = *canary, true, true
			*canary = 0
		}
		clear(used)
		var s, u int
		covered := false // an in-place update covered by a surge machine
		rest = rest[:0]
		start := len(sc.names)
		for _, w := range todo {
			if len(sc.names)-start >= capN || !fitsBudgets(g.Budgets, allowed, used, w.pm.Disruption) {
				rest = append(rest, w)
				continue
			}
			ok := false
			switch w.pm.Method {
			case MethodInPlace:
				if u < unavail {
					u, ok = u+1, true
				} else if unavail == 0 && s < surge && !covered {
					// As CAPI does: with maxUnavailable 0, one extra machine
					// covers one in-place update at a time.
					s, ok, covered = s+1, true, true
				}
			case MethodReplace:
				if s < surge {
					s, ok = s+1, true
				} else if u < unavail {
					u, ok = u+1, true
				}
			case MethodReplaceFirst:
				if ok = s < max(surge, 1); ok {
					s++
				}
			}
			if !ok {
				rest = append(rest, w)
				continue
			}
			for i, bd := range g.Budgets {
				if bd.AppliesTo(w.pm.Disruption) {
					used[i]++
				}
			}
			w.pm.Batch, w.pos = b.Index, int32(len(sc.names)-start)
			sc.names = append(sc.names, w.pm.Machine)
		}
		if end := len(sc.names); end > start {
			b.Machines = sc.names[start:end:end]
		}
		if len(b.Machines) == 0 { // cannot happen: every remaining machine fits an empty batch
			for _, w := range rest {
				w.set(MethodBlocked, "no batch can hold it under the rollout limits", nil)
			}
			break
		}
		plan.Batches = append(plan.Batches, b)
		todo, rest = rest, todo
	}
	clear(todo[:cap(todo)]) // the pointers stay valid, but do not keep them
	clear(rest[:cap(rest)])
	sc.todo, sc.rest = todo[:0], rest[:0]
}

func zeroBudget(budgets []Budget, allowed []int, r Reason) int {
	for i, b := range budgets {
		if allowed[i] == 0 && b.AppliesTo(r) {
			return i
		}
	}
	return -1
}

func fitsBudgets(budgets []Budget, allowed, used []int, r Reason) bool {
	for i, b := range budgets {
		if b.AppliesTo(r) && used[i] >= allowed[i] {
			return false
		}
	}
	return true
}

func disruptionOf(m *Machine) Reason {
	switch {
	case !m.Ready:
		return ReasonUnhealthy
	case m.Empty:
		return ReasonEmpty
	}
	return ReasonDrifted
}

// sortRank ranks machines for sortWork: unhealthy first, then empty.
func sortRank(m *Machine) int32 {
	switch {
	case !m.Ready:
		return 0
	case m.Empty:
		return 1
	}
	return 2
}

// sortWork orders machines: unhealthy first, then empty, then oldest, then
// by name. Names are unique, so the order is total and needs no stable
// sort.
func sortWork(ws []*work) {
	slices.SortFunc(ws, func(a, b *work) int {
		if a.rank != b.rank {
			return cmp.Compare(a.rank, b.rank)
		}
		if c := a.m.Created.Compare(b.m.Created); c != 0 {
			return c
		}
		return strings.Compare(a.m.Name, b.m.Name)
	})
}

// fields names the changed fields of two sets, both lists in one array
// (each capped, so appending to one never writes into the other); an empty
// set gives nil.
func fields(a, b diff.ChangeSet) (fa, fb []string) {
	na, nb := len(a.Changes), len(b.Changes)
	if na+nb == 0 {
		return nil, nil
	}
	out := make([]string, 0, na+nb)
	for _, c := range a.Changes {
		out = append(out, c.Field)
	}
	for _, c := range b.Changes {
		out = append(out, c.Field)
	}
	if na > 0 {
		fa = out[:na:na]
	}
	if nb > 0 {
		fb = out[na:]
	}
	return fa, fb
}

func parseVersion(field, s string) (*version.Version, error) {
	if s == "" {
		return nil, nil
	}
	v, err := version.ParseGeneric(s)
	if err != nil {
		// version's error quotes all of s; say it once, cut.
		return nil, fmt.Errorf("%w: %s: %s is not a version", ErrInvalidCluster, field, errtext.Quote(s))
	}
	return v, nil
}
