package preview

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment/mdutil"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
)

// Answerer answers Cluster API's in-place hooks as values: the extension
// that will be asked. *capi.Extension is one (extensionserver.Server's
// Extension gives the deployed configuration); a test double or another
// extension's adapter is another.
type Answerer interface {
	AnswerCanUpdateMachine(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest) (capi.Answer, error)
	AnswerCanUpdateMachineSet(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest) (capi.Answer, error)
}

// Option configures Predict.
type Option func(*options)

type options struct {
	settings map[string]string
	planner  *strategy.Planner
	clock    clock.PassiveClock
	dryRun   bool
	timings  Timings
	gates    GateReporter
}

// WithSettings are the ExtensionConfig's settings, sent in every request
// as Cluster API sends them (capi.SettingIgnore, capi.SettingDisabled...).
func WithSettings(settings map[string]string) Option {
	return func(o *options) { o.settings = settings }
}

// WithPlanner orders the machines into batches (default:
// strategy.NewPlanner with no options).
func WithPlanner(p *strategy.Planner) Option { return func(o *options) { o.planner = p } }

// WithClock is the reconciliation time rollout.after and rollout.before
// are judged at (default: real time).
func WithClock(c clock.PassiveClock) Option { return func(o *options) { o.clock = c } }

// WithServerDryRun sends each object of the change to the API server as a
// server-side apply with dryRun=All before previewing it, so Cluster API's
// webhooks default and validate it (a change the server refuses is an
// ErrInvalidChange naming it, and a partial object is merged with the live
// one as kubectl apply --server-side would), and dry-runs the desired
// control plane machines' objects as KubeadmControlPlane does before it
// asks CanUpdateMachine. Nothing is stored. It needs the "patch" verb on
// those kinds; without it the preview reads only.
func WithServerDryRun() Option { return func(o *options) { o.dryRun = true } }

// WithTimings sets the figures the estimates are made of (default
// DefaultTimings).
func WithTimings(t Timings) Option { return func(o *options) { o.timings = t } }

// Prediction is the preview of one change on one cluster: per machine,
// what Cluster API and the extension will do, in the order they will do
// it, with an estimate of how long.
type Prediction struct {
	// Cluster is the cluster's namespace/name.
	Cluster string `json:"cluster"`
	// At is when the prediction was made (the clock's time).
	At time.Time `json:"at"`
	// Machines lists every machine of the cluster once: the machines that
	// change group by group (control plane first) in the order Cluster
	// API reaches them, then the others by name.
	Machines []Machine `json:"machines"`
	// Groups says what happens to each KubeadmControlPlane and
	// MachineDeployment as a whole.
	Groups []Group `json:"groups"`
	// Estimate is how long the rollout takes: Cluster API rolls the groups
	// at the same time (after the control plane when ControlPlaneFirst),
	// each group wave after wave. It assumes every update succeeds: a
	// failed one stalls its group (see the package documentation).
	Estimate time.Duration `json:"estimate"`
	// ControlPlaneFirst: a managed topology's version changes, so the
	// topology controller upgrades the control plane before the workers.
	ControlPlaneFirst bool `json:"controlPlaneFirst,omitempty"`
	// Mode says who answered the hooks: ModeExtension (the deployed
	// extension, over HTTPS) or ModeInProcess.
	Mode string `json:"mode"`
	// Extensions names the ExtensionConfigs whose handlers answered in
	// ModeExtension.
	Extensions []string `json:"extensions,omitempty"`
	// Notes are facts about the change as a whole (a template edited in
	// place, a new MachineDeployment, a workload cluster not read).
	Notes []string `json:"notes,omitempty"`
}

// Machine is the prediction for one machine.
type Machine struct {
	// Name is the Machine's name.
	Name string `json:"name"`
	// Node is its Node's name, when it has one.
	Node string `json:"node,omitempty"`
	// Group is "control-plane" or the MachineDeployment's name ("" for a
	// machine neither owns).
	Group string `json:"group,omitempty"`
	// Role is ControlPlane or Worker.
	Role strategy.Role `json:"role"`
	// Method is InPlace, Replace, Blocked (the rollout will wait at this
	// machine) or Skip (nothing happens to it).
	Method strategy.Method `json:"method"`
	// Reason says why, in Cluster API's and the extension's words.
	Reason string `json:"reason"`
	// Updaters are the extension's updaters that apply the change.
	Updaters []string `json:"updaters,omitempty"`
	// InPlaceFields are the fields changed in place.
	InPlaceFields []string `json:"inPlaceFields,omitempty"`
	// ReplaceFields are the fields that force a replacement, as
	// "path (Category)".
	ReplaceFields []string `json:"replaceFields,omitempty"`
	// Blockers are the pods that would stop the drain, with why.
	Blockers []string `json:"blockers,omitempty"`
	// FromVersion and ToVersion are the Kubernetes versions before and after.
	FromVersion string `json:"fromVersion,omitempty"`
	// ToVersion is the Kubernetes version after.
	ToVersion string `json:"toVersion,omitempty"`
	// Wave is the machine's 1-based place in its group's rollout: the
	// machines of a wave are updated together, within the group's
	// maxSurge and maxUnavailable; 0 when nothing happens to it.
	Wave int `json:"wave,omitempty"`
	// Estimate is how long this machine's update takes.
	Estimate time.Duration `json:"estimate,omitempty"`
	// Steps are the questions of a managed topology's chained upgrade
	// (the control plane goes one minor at a time, the workers in the
	// fewest steps), when its group has more than one step: one per step
	// that changes the machine. Method and Reason are then the steps'
	// outcome: Blocked at the first blocked step (later steps wait), else
	// Replace at the first step that replaces the machine, else InPlace.
	Steps []Step `json:"steps,omitempty"`
	// Gates are what the extension's gates (a maintenance window, a soak,
	// a concurrency limit, blockers) say now about updating this machine
	// in place, each gate's answer, asked without taking anything: by the
	// deployed extension (Deployed.ReportGates), or in process with
	// WithGateReporter; only for a machine updated in place. Cluster
	// API's UpdateMachine asks them again when the rollout reaches the
	// machine.
	Gates []gatereport.Answer `json:"gates,omitempty"`
	// GateVerdict is what UpdateMachine would do with Gates now: Allow,
	// Wait or Stop ("" when the gates were not asked about it).
	GateVerdict strategy.Verdict `json:"gateVerdict,omitempty"`
	// GateError says why the gates were not asked about this machine
	// (gone since the cluster was read, the report out of time).
	GateError string `json:"gateError,omitempty"`
}

// Step is one question of a chained upgrade for one machine.
type Step struct {
	// FromVersion and ToVersion are the step's Kubernetes versions.
	FromVersion string `json:"fromVersion"`
	// ToVersion is the version the step takes the machine to.
	ToVersion string `json:"toVersion"`
	// Method is InPlace, Replace or Blocked.
	Method strategy.Method `json:"method"`
	// Reason says why.
	Reason string `json:"reason"`
	// Updaters are the extension's updaters that apply the step in place.
	Updaters []string `json:"updaters,omitempty"`
}

// KeepsName says whether the machine is still there, under its name,
// after the rollout: true unless it is replaced.
func (m Machine) KeepsName() bool { return m.Method != strategy.MethodReplace }

// Group is the prediction for a KubeadmControlPlane or MachineDeployment.
type Group struct {
	// Name is "control-plane" or the MachineDeployment's name.
	Name string `json:"name"`
	// Kind is KubeadmControlPlane or MachineDeployment.
	Kind string `json:"kind"`
	// Hook is the hook Cluster API asks (CanUpdateMachine,
	// CanUpdateMachineSet), "" when it asks none.
	Hook string `json:"hook,omitempty"`
	// Summary says what Cluster API does with the group.
	Summary string `json:"summary"`
	// Surge is how many new machines Cluster API creates first (their
	// names are not known before).
	Surge int `json:"surge,omitempty"`
	// Waves is how many waves the group's rollout takes.
	Waves int `json:"waves,omitempty"`
	// Estimate is how long the group's rollout takes.
	Estimate time.Duration `json:"estimate,omitempty"`
	// OnFailure says what Cluster API does with the group when one of
	// its in-place updates fails ("" when none is predicted): the
	// estimates assume none does.
	OnFailure string `json:"onFailure,omitempty"`
	// Gates says, in one line, what the deployed extension's gates would
	// answer now about the group's machines updated in place: open, or
	// the first gate that holds them and for how many ("" when not
	// asked: see Machine.Gates).
	Gates string `json:"gates,omitempty"`
}

// Timings are the figures estimates are made of: an in-place update
// takes Drain plus each updater's time, a replacement takes Replace.
// The defaults are round figures for a cloud VM and a kubeadm node
// (image pulls included); measure yours from the upgrader's journal
// (nodeexec.StepRecord durations) or your provider's provisioning time.
type Timings struct {
	// Drain is the time to cordon and drain a node.
	Drain time.Duration `json:"drain"`
	// Updaters is each updater's time, by name.
	Updaters map[string]time.Duration `json:"updaters,omitempty"`
	// Updater is the time of an updater Updaters does not name.
	Updater time.Duration `json:"updater"`
	// Replace is the time to provision a new machine, join it and drain
	// and delete the old one.
	Replace time.Duration `json:"replace"`
}

// DefaultTimings: drain 2m, kubeadm 6m, kubelet-args 1m,
// control-plane-config 2m, files 1m, other updaters 3m, replace 8m.
func DefaultTimings() Timings {
	return Timings{
		Drain: 2 * time.Minute,
		Updaters: map[string]time.Duration{
			"kubeadm": 6 * time.Minute, "kubelet-args": time.Minute, "control-plane-config": 2 * time.Minute, "files": time.Minute,
		},
		Updater: 3 * time.Minute,
		Replace: 8 * time.Minute,
	}
}

func (t Timings) of(m *Machine) time.Duration {
	if len(m.Steps) > 0 {
		var d time.Duration
		for _, st := range m.Steps {
			d += t.of(&Machine{Method: st.Method, Updaters: st.Updaters})
		}
		return d
	}
	switch m.Method {
	case strategy.MethodInPlace:
		d := t.Drain
		for _, u := range m.Updaters {
			if v, ok := t.Updaters[u]; ok {
				d += v
			} else {
				d += t.Updater
			}
		}
		return d
	case strategy.MethodReplace:
		return t.Replace
	}
	return 0
}

// ErrInvalidArgument is matched by the errors of Read, Predict and the
// Prediction's methods about their arguments: a nil client, snapshot,
// answerer or writer, a cluster key without namespace or name, drain
// options that do not parse.
var ErrInvalidArgument = errors.New("invalid argument")

// GroupControlPlane is the Group name of control plane machines.
const GroupControlPlane = "control-plane"

// Predict says what happens to each machine of snap's cluster when change
// is applied (nil or empty: what Cluster API would do now): Cluster API's
// rules decide which machines are out of date and which hook is asked
// (CanUpdateMachine for a KubeadmControlPlane's machines,
// CanUpdateMachineSet for a MachineDeployment's), ext answers as the
// extension will, and capi.Verify* applies the answer as Cluster API
// does: in place only when the patched objects then match. Nothing is
// written to the cluster (WithServerDryRun sends dry runs). mgmt reads the
// templates the objects name.
//
// A managed topology's new spec.topology.version is played step by step
// as Cluster API's topology controller plays it (see the package
// documentation); ext, when it is an *InProcess, is built again over the
// cluster as it will be at each step.
//
// What it does not predict: the names of machines Cluster API creates,
// which machine a MachineDeployment deletes when it scales a surge back
// down, remediation by MachineHealthChecks during the rollout, MachinePools,
// and ClusterClass changes other than spec.topology.version.
func Predict(ctx context.Context, mgmt client.Client, snap *Snapshot, change []*unstructured.Unstructured, ext Answerer, opts ...Option) (*Prediction, error) {
	switch {
	case mgmt == nil:
		return nil, fmt.Errorf("%w: nil management client", ErrInvalidArgument)
	case snap == nil:
		return nil, fmt.Errorf("%w: nil snapshot", ErrInvalidArgument)
	case ext == nil:
		return nil, fmt.Errorf("%w: nil answerer", ErrInvalidArgument)
	}
	if err := snap.check(); err != nil {
		return nil, err
	}
	if ip, ok := ext.(*InProcess); ok && (ip == nil || ip.now == nil) {
		return nil, errNoInProcess
	}
	o := options{clock: clock.RealClock{}, timings: DefaultTimings()}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.planner == nil {
		p, err := strategy.NewPlanner(strategy.PlannerOptions{})
		if err != nil {
			return nil, err
		}
		o.planner = p
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
	p := &predictor{ctx: ctx, mgmt: mgmt, snap: snap, ext: ext, o: o, now: metav1.NewTime(o.clock.Now())}
	if err := p.apply(change); err != nil {
		return nil, err
	}
	p.members, p.surgeDeletes = map[string][]string{}, map[string]bool{}
	pr := &Prediction{Cluster: snap.Cluster.Namespace + "/" + snap.Cluster.Name, At: p.now.UTC(), Mode: ModeInProcess}
	if d, ok := ext.(*Deployed); ok {
		pr.Mode, pr.Extensions = ModeExtension, d.ExtensionConfigs()
	}
	byName := map[string]*Machine{}
	for _, m := range snap.Machines {
		pm := &Machine{Name: m.Name, Node: m.Status.NodeRef.Name, Role: strategy.RoleWorker, FromVersion: m.Spec.Version, ToVersion: m.Spec.Version,
			Method: strategy.MethodSkip, Reason: "owned by neither a KubeadmControlPlane nor a MachineDeployment: Cluster API rolls nothing out"}
		byName[m.Name] = pm
	}
	if p.kcp != nil {
		g, err := p.controlPlane(byName)
		if err != nil {
			return nil, err
		}
		pr.Groups = append(pr.Groups, g)
	}
	for _, md := range p.mds {
		g, err := p.machineDeployment(md, byName)
		if err != nil {
			return nil, err
		}
		pr.Groups = append(pr.Groups, g)
	}
	p.blockers(byName)
	pr.Notes = p.notes // the change's and the groups'
	for i := range pr.Groups {
		g := &pr.Groups[i]
		g.Summary = summarize(p.members[g.Name], byName, g.Surge)
		if p.surgeDeletes[g.Name] {
			g.Summary += "; one machine of the group is deleted when the surge is scaled back down (Cluster API's deletion order picks which)"
		}
		g.OnFailure = p.onFailure(g, byName)
	}
	if snap.Nodes == nil {
		pr.Notes = append(pr.Notes, "workload cluster not read: drain blockers (PodDisruptionBudgets, do-not-disrupt pods) are unknown")
	}
	if err := p.plan(pr, byName); err != nil {
		return nil, err
	}
	gates := o.gates
	if r, ok := ext.(GateReporter); ok && gates == nil {
		gates = r
	}
	if gates != nil {
		p.reportGates(gates, pr)
	}
	return pr, nil
}

// GateReporter says what the gates of the extension's UpdateMachine (a
// maintenance window, a soak, a concurrency limit, blockers) would answer
// now about machines of a cluster, taking nothing: a Deployed asks the
// deployed extension (ReportGates), an extensionserver.Server answers in
// process.
type GateReporter interface {
	ReportGates(ctx context.Context, cluster client.ObjectKey, machines []string) (*gatereport.Report, error)
}

// WithGateReporter has Predict ask r about the gates (Machine.Gates,
// Group.Gates), for an in-process answerer; a Deployed answerer is its own
// reporter without it.
func WithGateReporter(r GateReporter) Option { return func(o *options) { o.gates = r } }

// reportGates asks the deployed extension's gates about the machines
// updated in place and says what they answer, per machine and per group;
// a report that cannot be had is a note, not an error: the prediction of
// what Cluster API does stands without it.
func (p *predictor) reportGates(d GateReporter, pr *Prediction) {
	var names []string
	for _, m := range pr.Machines {
		if m.Method == strategy.MethodInPlace {
			names = append(names, m.Name)
		}
	}
	if len(names) == 0 {
		return
	}
	var reports []gatereport.MachineReport
	for chunk := range slices.Chunk(names, gatereport.MaxMachines) {
		rep, err := d.ReportGates(p.ctx, client.ObjectKeyFromObject(p.snap.Cluster), chunk)
		if err == nil && rep == nil {
			err = errors.New("the reporter gave no report")
		}
		if err != nil {
			pr.Notes = append(pr.Notes, "the gates were not asked: "+errtext.Clip(err.Error()))
			return
		}
		reports = append(reports, rep.Machines...)
	}
	byName := make(map[string]gatereport.MachineReport, len(reports))
	for _, r := range reports {
		byName[r.Name] = r
	}
	for i := range pr.Machines {
		if r, ok := byName[pr.Machines[i].Name]; ok {
			m := &pr.Machines[i]
			m.Gates, m.GateVerdict, m.GateError = r.Gates, r.Verdict, r.Error
		}
	}
	for i := range pr.Groups {
		g := &pr.Groups[i]
		var group []gatereport.MachineReport
		for _, m := range pr.Machines {
			if r, ok := byName[m.Name]; ok && m.Group == g.Name {
				group = append(group, r)
			}
		}
		g.Gates = gatesLine(group)
	}
}

// gatesLine sums up what the gates say about a group's machines: the
// gate that holds the first held machine back (one that Stops before one
// that Waits: UpdateMachine then fails), with the longest wait of that
// machine's gates, and how many machines the gates hold; else that all are
// open; and the machines not asked about.
func gatesLine(reports []gatereport.MachineReport) string {
	if len(reports) == 0 {
		return ""
	}
	var held, asked int
	var shown *gatereport.Answer
	var shownVerdict strategy.Verdict
	var wait time.Duration
	var names []string
	var failed []string
	for _, r := range reports {
		if r.Error != "" {
			failed = append(failed, r.Name+": "+r.Error)
			continue
		}
		asked++
		if names == nil {
			names = []string{}
			for _, a := range r.Gates {
				names = append(names, a.Gate)
			}
		}
		if r.Verdict == strategy.VerdictAllow {
			continue
		}
		held++
		if shown != nil && !(r.Verdict == strategy.VerdictStop && shownVerdict != strategy.VerdictStop) {
			continue
		}
		// The machine's deciding answer: its first Stop, else its first
		// Wait, with the longest of its waits (all must open).
		var longest time.Duration
		var first *gatereport.Answer
		for j := range r.Gates {
			a := &r.Gates[j]
			if a.Verdict == strategy.VerdictWait && a.RetryAfter != nil {
				longest = max(longest, a.RetryAfter.Duration)
			}
			if a.Verdict == r.Verdict && first == nil {
				first = a
			}
		}
		if first != nil {
			shown, shownVerdict, wait = first, r.Verdict, longest
		}
	}
	var line string
	switch {
	case shown != nil:
		line = fmt.Sprintf("gates now: %s by %s", shown.Verdict, shown.Gate)
		if shown.Reason != "" {
			line += ": " + shown.Reason
		}
		if shownVerdict == strategy.VerdictWait && wait > 0 {
			line += fmt.Sprintf(" (retry after %s)", wait)
		}
		line += fmt.Sprintf("; the gates hold %d of %d machines", held, len(reports))
	case asked == 0:
		line = "gates now: not asked"
	case len(names) == 0:
		line = "gates now: none configured on the extension"
	default:
		line = "gates now: open (" + strings.Join(names, ", ") + ")"
	}
	if len(failed) > 0 {
		line += "; not asked about " + strings.Join(failed, "; ")
	}
	return line + "; asked again when Cluster API reaches each machine"
}

// predictor holds one Predict call's state.
type predictor struct {
	ctx   context.Context
	mgmt  client.Client
	ov    *overlay
	snap  *Snapshot
	ext   Answerer
	o     options
	now   metav1.Time
	kcp   *controlplanev1.KubeadmControlPlane
	mds   []*clusterv1.MachineDeployment
	notes []string
	// members are each group's machine names; surgeDeletes the groups
	// whose surge machine is scaled away after in-place updates.
	members      map[string][]string
	surgeDeletes map[string]bool
	// topologyUpgrade: a managed topology's version changes, so the
	// control plane goes before the workers, through cpPlan's versions;
	// the MachineDeployments it manages through workersPlan's.
	topologyUpgrade     bool
	cpPlan, workersPlan []string
	// built are InProcess answerers built over a view of the control
	// plane alone, by its version.
	built map[string]Answerer
	// cpReached is the last version of the control plane's steps it
	// completes; cpBlocked the version of the step it is blocked at ("":
	// none).
	cpReached, cpBlocked string
}

// apply lays the change over the snapshot: the proposed control plane and
// MachineDeployments, and an overlay for the templates.
func (p *predictor) apply(change []*unstructured.Unstructured) error {
	ns := p.snap.Cluster.Namespace
	objs := map[objKey]*unstructured.Unstructured{}
	for i, u := range change {
		if u == nil {
			return fmt.Errorf("%w: change[%d] is nil", ErrInvalidChange, i)
		}
		if err := checkObject(u, fmt.Sprintf("change[%d]", i)); err != nil {
			return err
		}
		u = u.DeepCopy()
		if u.GetNamespace() == "" {
			u.SetNamespace(ns)
		}
		if u.GetNamespace() != ns {
			p.notes = append(p.notes, fmt.Sprintf("%s is in another namespace than the cluster: left out", keyOf(u)))
			continue
		}
		if p.o.dryRun {
			out, err := dryRun(p.ctx, p.mgmt, u)
			if err != nil {
				return err
			}
			u = out
		}
		if _, dup := objs[keyOf(u)]; dup {
			return fmt.Errorf("%w: %s appears twice", ErrInvalidChange, keyOf(u))
		}
		objs[keyOf(u)] = u
	}
	p.ov = &overlay{Client: p.mgmt, objs: objs}
	if p.snap.ControlPlane != nil {
		p.kcp = p.snap.ControlPlane.DeepCopy()
	}
	mdByName := map[string]int{}
	for _, md := range p.snap.MachineDeployments {
		mdByName[md.Name] = len(p.mds)
		p.mds = append(p.mds, md.DeepCopy())
	}
	for _, k := range sortedKeys(objs) {
		u := objs[k]
		switch {
		case k.group == clusterv1.GroupVersion.Group && k.kind == "Cluster":
			if k.name != p.snap.Cluster.Name {
				p.notes = append(p.notes, fmt.Sprintf("%s is another cluster: left out", k))
				continue
			}
			if err := p.applyCluster(u); err != nil {
				return err
			}
		case k.group == controlplanev1.GroupVersion.Group && k.kind == "KubeadmControlPlane":
			if p.kcp == nil || k.name != p.kcp.Name {
				p.notes = append(p.notes, fmt.Sprintf("%s is not this cluster's control plane: left out", k))
				continue
			}
			kcp := &controlplanev1.KubeadmControlPlane{}
			if err := toTyped(u, kcp); err != nil {
				return err
			}
			p.kcp = kcp
		case k.group == clusterv1.GroupVersion.Group && k.kind == "MachineDeployment":
			md := &clusterv1.MachineDeployment{}
			if err := toTyped(u, md); err != nil {
				return err
			}
			i, ok := mdByName[k.name]
			if !ok {
				p.notes = append(p.notes, fmt.Sprintf("%s is new: Cluster API creates its machines; no existing machine changes for it", k))
				continue
			}
			p.mds[i] = md
		default:
			if err := p.noteTemplateEdit(k, u); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyCluster takes a Cluster from the change: with a managed topology,
// a new spec.topology.version is what the topology controller writes to
// the control plane and to every MachineDeployment it manages; any other
// topology change is refused (its effect is the topology controller's
// patches, which the preview does not compute). Other changes roll no
// machine.
func (p *predictor) applyCluster(u *unstructured.Unstructured) error {
	proposed := &clusterv1.Cluster{}
	if err := toTyped(u, proposed); err != nil {
		return err
	}
	live := p.snap.Cluster
	if !live.Spec.Topology.IsDefined() {
		p.notes = append(p.notes, "Cluster "+live.Name+": a Cluster's own spec rolls no machine out")
		return nil
	}
	lt, pt := live.Spec.Topology.DeepCopy(), proposed.Spec.Topology.DeepCopy()
	from, to := lt.Version, pt.Version
	lt.Version, pt.Version = "", ""
	lj, _ := json.Marshal(lt)
	pj, _ := json.Marshal(pt)
	if string(lj) != string(pj) {
		return fmt.Errorf("%w: Cluster %s: only spec.topology.version can be previewed in a managed topology; other topology changes reach machines through ClusterClass patches the preview does not compute", ErrInvalidChange, live.Name)
	}
	if from == to {
		return nil
	}
	p.topologyUpgrade = true
	if err := p.topologyPlan(to); err != nil {
		return err
	}
	if p.kcp != nil {
		p.kcp.Spec.Version = to
	}
	for _, md := range p.mds {
		if _, managed := md.Labels[clusterv1.ClusterTopologyOwnedLabel]; managed {
			md.Spec.Template.Spec.Version = to
		}
	}
	note := fmt.Sprintf("Cluster %s: spec.topology.version %s -> %s: the topology controller upgrades the control plane first", live.Name, from, to)
	if len(p.cpPlan) > 1 {
		note += " (through " + strings.Join(p.cpPlan, ", ") + ", one minor at a time)"
	}
	note += ", then the MachineDeployments"
	if len(p.workersPlan) > 1 {
		note += " (through " + strings.Join(p.workersPlan, ", ") + ")"
	}
	if _, ok := p.ext.(*InProcess); ok {
		note += "; each question is answered over the cluster as it will be when Cluster API asks it"
	} else {
		note += "; the answers are given over the cluster as it is now, so a check that reads the control plane's version (as upgradekit's skew check does) may answer otherwise when Cluster API asks (--mode in-process answers over the cluster as it will be)"
	}
	p.notes = append(p.notes, note)
	return nil
}

// noteTemplateEdit notes a template changed under its own name: Cluster
// API finds templates by reference, so editing one rolls nothing out.
func (p *predictor) noteTemplateEdit(k objKey, u *unstructured.Unstructured) error {
	if !strings.HasSuffix(k.kind, "Template") {
		p.notes = append(p.notes, fmt.Sprintf("%s: not a kind the preview follows: left out", k))
		return nil
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	err := p.mgmt.Get(p.ctx, client.ObjectKey{Namespace: k.namespace, Name: k.name}, live)
	switch {
	case client.IgnoreNotFound(err) != nil:
		return fmt.Errorf("preview: read %s: %w", k, err)
	case err != nil:
		return nil // new: found through the overlay when referenced
	}
	lj, _ := json.Marshal(live.Object["spec"])
	pj, _ := json.Marshal(u.Object["spec"])
	if string(lj) != string(pj) {
		p.notes = append(p.notes, fmt.Sprintf("%s is edited in place: Cluster API rolls no machine for a template's content (machines created from now on use it); create a new template and point the MachineDeployment or KubeadmControlPlane at it", k))
	}
	return nil
}

// controlPlane predicts the KubeadmControlPlane's machines: one step per
// version of a managed topology's upgrade plan, one step otherwise.
func (p *predictor) controlPlane(byName map[string]*Machine) (Group, error) {
	var owned []*clusterv1.Machine
	for _, m := range p.snap.Machines {
		if controlledBy(m, "KubeadmControlPlane", p.kcp.Name) {
			owned = append(owned, m)
		}
	}
	versions := []string{p.kcp.Spec.Version}
	if p.topologyUpgrade && len(p.cpPlan) > 0 {
		versions = p.cpPlan
		// A rollout in progress ends before the topology controller
		// moves the control plane on.
		if live := p.snap.ControlPlane.Spec.Version; slices.ContainsFunc(owned, func(m *clusterv1.Machine) bool { return m.Spec.Version != live }) {
			versions = append([]string{live}, versions...)
		}
	}
	chained := len(versions) > 1
	var g Group
	hook := ""
	machines := owned
	st := &cpState{infra: p.snap.InfraMachines, configs: p.snap.KubeadmConfigs}
	for i, v := range versions {
		p.kcp.Spec.Version = v
		view := []client.Object{p.kcp.DeepCopy()}
		if i > 0 {
			for _, m := range machines {
				view = append(view, m)
			}
		}
		ans, caveat, err := p.answerer(view, i > 0)
		if err != nil {
			return g, err
		}
		step := map[string]*Machine{}
		for _, m := range machines {
			pm := byName[m.Name]
			step[m.Name] = &Machine{Name: m.Name, Node: pm.Node, FromVersion: m.Spec.Version}
		}
		next := &cpState{infra: maps.Clone(st.infra), configs: maps.Clone(st.configs)}
		if g, err = p.controlPlaneStep(machines, st, next, ans, step); err != nil {
			return g, err
		}
		hook = cmp.Or(hook, g.Hook)
		if p.fold(byName, step, chained, caveat, "the control plane", versions, i) {
			p.cpBlocked = v
			break
		}
		p.cpReached = v
		// After the step every machine runs v: in place, or replaced by
		// one created at v (whose name the preview does not know).
		after := make([]*clusterv1.Machine, 0, len(machines))
		for _, m := range machines {
			m = m.DeepCopy()
			m.Spec.Version = v
			after = append(after, m)
		}
		machines, st = after, next
	}
	return p.finish(g, hook, owned, byName, chained), nil
}

// fold merges step i's predictions (of versions) into byName, and says
// whether a machine of group is blocked there: its later steps, if any,
// wait, which a note says.
func (p *predictor) fold(byName, step map[string]*Machine, chained bool, caveat, group string, versions []string, i int) bool {
	blocked := false
	for name, st := range step {
		merge(byName[name], st, chained, caveat)
		blocked = blocked || st.Method == strategy.MethodBlocked
	}
	if blocked && i < len(versions)-1 {
		p.notes = append(p.notes, fmt.Sprintf("%s's step to %s is blocked: its later steps (%s) wait", group, versions[i], strings.Join(versions[i+1:], ", ")))
	}
	return blocked
}

// finish completes a group's prediction over its steps: each machine's
// outcome from its steps when chained, the hook asked, its members.
func (p *predictor) finish(g Group, hook string, owned []*clusterv1.Machine, byName map[string]*Machine, chained bool) Group {
	g.Hook = hook
	p.members[g.Name] = nil
	for _, m := range owned {
		if chained {
			settle(byName[m.Name])
		}
		p.members[g.Name] = append(p.members[g.Name], m.Name)
	}
	return g
}

// cpState is the control plane machines' KubeadmConfigs and
// infrastructure machines, by machine name, before a step of a chained
// upgrade.
type cpState struct {
	infra   map[string]*unstructured.Unstructured
	configs map[string]*bootstrapv1.KubeadmConfig
}

// controlPlaneStep predicts one step of the KubeadmControlPlane's
// machines (p.kcp at the step's version) into step, ans answering.
func (p *predictor) controlPlaneStep(owned []*clusterv1.Machine, st, next *cpState, ans Answerer, step map[string]*Machine) (Group, error) {
	g := Group{Name: GroupControlPlane, Kind: "KubeadmControlPlane"}
	var outdated []*Machine
	for _, m := range owned {
		pm := step[m.Name]
		pm.Group, pm.Role, pm.ToVersion = GroupControlPlane, strategy.RoleControlPlane, p.kcp.Spec.Version
		upToDate, res, err := upToDate(p.ctx, p.ov, p.snap.Cluster, m, p.kcp, &p.now, st.infra, st.configs)
		if err != nil {
			return g, fmt.Errorf("preview: KubeadmControlPlane %s: machine %s: %w", p.kcp.Name, m.Name, err)
		}
		if upToDate {
			pm.Method, pm.Reason = strategy.MethodSkip, "up to date with the KubeadmControlPlane"
			continue
		}
		outdated = append(outdated, pm)
		// After the step the machine's KubeadmConfig and infrastructure
		// machine are what Cluster API wants now (updated in place, or
		// those of the machine replacing it).
		if res.DesiredKubeadmConfig != nil {
			next.configs[m.Name] = res.DesiredKubeadmConfig.DeepCopy()
		}
		if res.DesiredInfraMachine != nil {
			next.infra[m.Name] = res.DesiredInfraMachine.DeepCopy()
		}
		why := strings.Join(res.LogMessages, "; ")
		if !res.EligibleForInPlaceUpdate {
			pm.Method, pm.Reason = strategy.MethodReplace, "not eligible for an in-place update: "+why
			continue
		}
		if res.DesiredMachine == nil || res.CurrentInfraMachine == nil || res.DesiredInfraMachine == nil || res.CurrentKubeadmConfig == nil || res.DesiredKubeadmConfig == nil {
			pm.Method, pm.Reason = strategy.MethodReplace, "Cluster API asks no extension (a KubeadmConfig or infrastructure machine it compares is missing): "+why
			continue
		}
		g.Hook = "CanUpdateMachine"
		reason, req, err := machineRequest(p.ctx, p.mgmt, p.o.dryRun, m, res, p.o.settings)
		if err != nil {
			return g, fmt.Errorf("preview: machine %s: %w", m.Name, err)
		}
		if reason != "" {
			pm.Method, pm.Reason = strategy.MethodReplace, reason
			continue
		}
		wire, err := overTheWire(req)
		if err != nil {
			return g, fmt.Errorf("preview: machine %s: %w", m.Name, err)
		}
		a, aerr := ans.AnswerCanUpdateMachine(p.ctx, wire)
		resp := &runtimehooksv1.CanUpdateMachineResponse{CommonResponse: runtimehooksv1.CommonResponse{Status: runtimehooksv1.ResponseStatusSuccess},
			MachinePatch: a.MachinePatch, BootstrapConfigPatch: a.BootstrapPatch, InfrastructureMachinePatch: a.InfrastructurePatch}
		var verr error
		if aerr == nil && a.Accept {
			verr = capi.VerifyCanUpdateMachine(wire, resp)
		}
		judge(pm, "CanUpdateMachine", why, a, aerr, verr)
	}
	// KubeadmControlPlane creates maxSurge machines first, then updates
	// the outdated ones in place one at a time while fewer than the
	// replicas are up to date: the last maxSurge machines it reaches are
	// deleted instead (reconcilers/kubeadmcontrolplane/update.go). It
	// reaches the oldest first (scale.go, one failure domain).
	surge := 1
	if ms := p.kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge; ms != nil {
		surge = ms.IntValue()
	}
	if len(outdated) > 0 {
		g.Surge = surge
		created := map[string]metav1.Time{}
		for _, m := range owned {
			created[m.Name] = m.CreationTimestamp
		}
		slices.SortStableFunc(outdated, func(a, b *Machine) int {
			if c := created[a.Name].Compare(created[b.Name].Time); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		for i := len(outdated) - 1; i >= 0 && i >= len(outdated)-surge; i-- {
			if pm := outdated[i]; pm.Method == strategy.MethodInPlace {
				pm.Method = strategy.MethodReplace
				pm.Reason = fmt.Sprintf("maxSurge %d: KubeadmControlPlane creates %d new machine(s) first, so it deletes the last outdated machine(s) instead of updating them in place (the extension accepts: %s)", surge, surge, pm.Reason)
				pm.Updaters, pm.InPlaceFields = nil, nil
			}
		}
	}
	return g, nil
}

// machineDeployment predicts a MachineDeployment's machines: one step per
// version of a managed topology's workers upgrade plan, one step
// otherwise.
func (p *predictor) machineDeployment(md *clusterv1.MachineDeployment, byName map[string]*Machine) (Group, error) {
	var msList []*clusterv1.MachineSet
	for _, ms := range p.snap.MachineSets {
		if ref := metav1.GetControllerOf(ms); ref != nil && ref.Kind == "MachineDeployment" && ref.Name == md.Name {
			msList = append(msList, ms.DeepCopy())
		}
	}
	var owned []*clusterv1.Machine
	for _, m := range p.snap.Machines {
		for _, ms := range msList {
			if controlledBy(m, "MachineSet", ms.Name) {
				owned = append(owned, m)
			}
		}
	}
	_, managed := md.Labels[clusterv1.ClusterTopologyOwnedLabel]
	versions := []string{md.Spec.Template.Spec.Version}
	if p.topologyUpgrade && managed && len(p.workersPlan) > 0 {
		versions = p.workersPlan
		// A rollout in progress ends first.
		for _, live := range p.snap.MachineDeployments {
			if live.Name == md.Name && slices.ContainsFunc(owned, func(m *clusterv1.Machine) bool { return m.Spec.Version != live.Spec.Template.Spec.Version }) {
				versions = append([]string{live.Spec.Template.Spec.Version}, versions...)
			}
		}
	}
	if p.topologyUpgrade && managed && p.cpBlocked != "" {
		// The topology controller moves workers to a version once the
		// control plane runs it: not past where the control plane stops.
		var kept []string
		for _, v := range versions {
			if p.cpReached != "" && cmpVersionStrings(v, p.cpReached) <= 0 {
				kept = append(kept, v)
			}
		}
		if len(kept) < len(versions) {
			p.notes = append(p.notes, fmt.Sprintf("MachineDeployment %s waits for the control plane before its step to %s", md.Name, versions[len(kept)]))
		}
		if len(kept) == 0 {
			for _, m := range owned {
				pm := byName[m.Name]
				pm.Group, pm.ToVersion, pm.Method = md.Name, versions[len(versions)-1], strategy.MethodBlocked
				pm.Reason = fmt.Sprintf("waits for the control plane, blocked at its step to %s: Cluster API moves the workers once the control plane runs their version", p.cpBlocked)
			}
			return p.finish(Group{Name: md.Name, Kind: "MachineDeployment"}, "", owned, byName, false), nil
		}
		versions = kept
	}
	chained := len(versions) > 1
	var g Group
	hook := ""
	for i, v := range versions {
		at := md.DeepCopy()
		at.Spec.Template.Spec.Version = v
		var view []client.Object
		kcpMoved := false
		if p.kcp != nil {
			kcp := p.kcp.DeepCopy()
			if p.topologyUpgrade && managed {
				kcp.Spec.Version = v // the topology controller moves workers to v once the control plane runs it
			}
			view = append(view, kcp)
			kcpMoved = p.snap.ControlPlane != nil && kcp.Spec.Version != p.snap.ControlPlane.Spec.Version
		}
		if i > 0 {
			for _, ms := range msList {
				view = append(view, ms)
			}
		}
		ans, caveat, err := p.answerer(view, i > 0 || kcpMoved)
		if err != nil {
			return g, err
		}
		step := map[string]*Machine{}
		for _, m := range owned {
			from := m.Spec.Version
			if i > 0 {
				from = versions[i-1]
			}
			step[m.Name] = &Machine{Name: m.Name, Node: byName[m.Name].Node, Role: strategy.RoleWorker, FromVersion: from}
		}
		if g, err = p.machineDeploymentStep(at, msList, owned, ans, step); err != nil {
			return g, err
		}
		hook = cmp.Or(hook, g.Hook)
		if p.fold(byName, step, chained, caveat, "MachineDeployment "+md.Name, versions, i) {
			break
		}
		next := make([]*clusterv1.MachineSet, 0, len(msList))
		for _, ms := range msList {
			ms = ms.DeepCopy()
			ms.Spec.Template.Spec.Version = v
			next = append(next, ms)
		}
		msList = next
	}
	return p.finish(g, hook, owned, byName, chained), nil
}

// machineDeploymentStep predicts one step of a MachineDeployment's
// machines (owned, in msList's MachineSets) into step, ans answering.
func (p *predictor) machineDeploymentStep(md *clusterv1.MachineDeployment, msList []*clusterv1.MachineSet, owned []*clusterv1.Machine, ans Answerer, step map[string]*Machine) (Group, error) {
	g := Group{Name: md.Name, Kind: "MachineDeployment"}
	machinesOf := map[string][]*clusterv1.Machine{}
	for _, m := range owned {
		for _, ms := range msList {
			if controlledBy(m, "MachineSet", ms.Name) {
				machinesOf[ms.Name] = append(machinesOf[ms.Name], m)
				pm := step[m.Name]
				pm.Group, pm.ToVersion = md.Name, md.Spec.Template.Spec.Version
			}
		}
	}
	if len(msList) == 0 {
		return g, nil
	}
	newMS, oldMSs, results, err := findMachineSets(md, msList, p.now)
	if err != nil {
		return g, err
	}
	if newMS != nil {
		for _, m := range machinesOf[newMS.Name] {
			pm := step[m.Name]
			pm.Method, pm.Reason = strategy.MethodSkip, "its MachineSet "+newMS.Name+" matches the MachineDeployment's template"
		}
	}
	desiredNew := desiredMachineSet(p.ctx, md, newMS)
	onDelete := md.Spec.Rollout.Strategy.Type == clusterv1.OnDeleteMachineDeploymentStrategyType
	accepted := false
	for _, old := range oldMSs {
		ms := machinesOf[old.Name]
		if len(ms) == 0 {
			continue
		}
		res := results[old.Name]
		why := strings.Join(res.LogMessages, ", ")
		set := func(method strategy.Method, reason string) {
			for _, m := range ms {
				step[m.Name].Method, step[m.Name].Reason = method, reason
			}
		}
		switch {
		case onDelete:
			set(strategy.MethodSkip, "rollout strategy OnDelete: Cluster API replaces this machine when you delete it ("+why+")")
			continue
		case !res.EligibleForInPlaceUpdate:
			set(strategy.MethodReplace, "not eligible for an in-place update: "+why)
			continue
		}
		req, reason, err := p.machineSetRequest(md, old, desiredNew)
		if err != nil {
			return g, err
		}
		if reason != "" {
			set(strategy.MethodReplace, reason+" ("+why+")")
			continue
		}
		g.Hook = "CanUpdateMachineSet"
		wire, err := overTheWire(req)
		if err != nil {
			return g, fmt.Errorf("preview: MachineSet %s: %w", old.Name, err)
		}
		a, aerr := ans.AnswerCanUpdateMachineSet(p.ctx, wire)
		resp := &runtimehooksv1.CanUpdateMachineSetResponse{CommonResponse: runtimehooksv1.CommonResponse{Status: runtimehooksv1.ResponseStatusSuccess},
			MachineSetPatch: a.MachinePatch, BootstrapConfigTemplatePatch: a.BootstrapPatch, InfrastructureMachineTemplatePatch: a.InfrastructurePatch}
		var verr error
		if aerr == nil && a.Accept {
			verr = capi.VerifyCanUpdateMachineSet(wire, resp)
		}
		for _, m := range ms {
			judge(step[m.Name], "CanUpdateMachineSet", why, a, aerr, verr)
			accepted = accepted || step[m.Name].Method == strategy.MethodInPlace
		}
	}
	// With maxSurge > 0 the rollout planner lets one surge machine be
	// created to make room for in-place updates, and scales the new
	// MachineSet back down at the end (reconcileInPlaceUpdateIntent);
	// replacements surge up to maxSurge.
	if surge := mdutil.MaxSurge(*md); surge > 0 && len(oldMSs) > 0 && !onDelete {
		g.Surge = int(surge)
		if accepted {
			g.Surge = 1
		}
	}
	p.surgeDeletes[g.Name] = accepted && g.Surge > 0
	return g, nil
}

// machineSetRequest gathers the templates CanUpdateMachineSet carries; a
// reason is returned instead when Cluster API asks no extension.
func (p *predictor) machineSetRequest(md *clusterv1.MachineDeployment, old, desiredNew *clusterv1.MachineSet) (*runtimehooksv1.CanUpdateMachineSetRequest, string, error) {
	get := func(ref clusterv1.ContractVersionedObjectReference, what string) (*unstructured.Unstructured, error) {
		if !ref.IsDefined() {
			return nil, nil
		}
		mapping, err := p.mgmt.RESTMapper().RESTMapping(schemaGK(ref))
		if err != nil {
			return nil, fmt.Errorf("preview: MachineDeployment %s: %s %s: %w", md.Name, what, ref.Kind, err)
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(mapping.GroupVersionKind)
		if err := p.ov.Get(p.ctx, client.ObjectKey{Namespace: md.Namespace, Name: ref.Name}, u); err != nil {
			return nil, fmt.Errorf("preview: MachineDeployment %s: read %s %s %s: %w", md.Name, what, ref.Kind, ref.Name, err)
		}
		return u, nil
	}
	desiredOld := desiredMachineSet(p.ctx, md, old)
	curInfra, err := get(old.Spec.Template.Spec.InfrastructureRef, "infrastructure template")
	if err != nil {
		return nil, "", err
	}
	desInfra, err := get(md.Spec.Template.Spec.InfrastructureRef, "infrastructure template")
	if err != nil {
		return nil, "", err
	}
	curBoot, err := get(old.Spec.Template.Spec.Bootstrap.ConfigRef, "bootstrap template")
	if err != nil {
		return nil, "", err
	}
	desBoot, err := get(md.Spec.Template.Spec.Bootstrap.ConfigRef, "bootstrap template")
	if err != nil {
		return nil, "", err
	}
	if curInfra == nil || desInfra == nil {
		return nil, "Cluster API asks no extension without both infrastructure templates", nil
	}
	if (curBoot == nil) != (desBoot == nil) {
		return nil, "Cluster API asks no extension when only one side has a bootstrap template", nil
	}
	req, err := machineSetRequest(desiredOld, desiredNew, curBoot, desBoot, curInfra, desInfra, p.o.settings)
	if err != nil {
		return nil, "", fmt.Errorf("preview: MachineSet %s: %w", old.Name, err)
	}
	return req, "", nil
}

// judge records a hook's answer on a machine: in place when the
// extension accepts and Cluster API's comparison after its patches
// agrees; replaced on a decline or when the patches leave differences;
// blocked when the extension answers a Failure (Cluster API keeps asking
// and the rollout waits).
func judge(pm *Machine, hook, why string, a capi.Answer, aerr, verr error) {
	switch {
	case aerr != nil:
		pm.Method, pm.Reason = strategy.MethodBlocked, hook+" answers Failure, so Cluster API waits and asks again: "+aerr.Error()
	case !a.Accept:
		pm.Method, pm.Reason = strategy.MethodReplace, hook+" declines: "+strings.TrimPrefix(a.Message, "cannot update in place: ")
		pm.ReplaceFields = a.Declined
	case verr != nil:
		pm.Method, pm.Reason = strategy.MethodReplace, hook+" accepts, but Cluster API would still roll it out: "+verr.Error()
		var re *capi.RollOutError
		if errors.As(verr, &re) {
			pm.ReplaceFields = re.Fields
		}
	default:
		pm.Method, pm.Reason = strategy.MethodInPlace, hook+" accepts: "+a.Message
		pm.Updaters = a.Decision.Updaters()
		for _, c := range a.Decision.InPlace.Changes {
			pm.InPlaceFields = append(pm.InPlaceFields, c.Field)
		}
	}
	if why != "" {
		pm.Reason += " (out of date: " + why + ")"
	}
}

// blockers marks the machines to be updated or replaced whose node a drain
// would stop on.
func (p *predictor) blockers(byName map[string]*Machine) {
	for _, pm := range byName {
		if pm.Node == "" || (pm.Method != strategy.MethodInPlace && pm.Method != strategy.MethodReplace) {
			continue
		}
		for _, b := range p.snap.DrainBlockers[pm.Node] {
			// A replaced machine is drained by Cluster API, which honours
			// PodDisruptionBudgets and its own drain rules (pods it waits
			// for), but not the extension's opt-out annotations.
			if pm.Method == strategy.MethodInPlace || len(b.PDBs) > 0 || b.WaitsForCompletion {
				pm.Blockers = append(pm.Blockers, b.String())
			}
		}
		if len(pm.Blockers) == 0 {
			continue
		}
		was := "updated in place"
		if pm.Method == strategy.MethodReplace {
			was = "replaced"
		}
		pm.Method = strategy.MethodBlocked
		pm.Reason = fmt.Sprintf("to be %s, but the drain of node %s will wait: %s", was, pm.Node, strings.Join(pm.Blockers, "; "))
	}
}

// plan orders the changing machines with the planner and fills the
// estimates.
func (p *predictor) plan(pr *Prediction, byName map[string]*Machine) error {
	in := strategy.Cluster{Name: pr.Cluster}
	decision := func(pm *Machine) *strategy.Decision {
		switch pm.Method {
		case strategy.MethodInPlace:
			return &strategy.Decision{Outcome: strategy.OutcomeInPlace, Message: pm.Reason}
		case strategy.MethodReplace:
			return &strategy.Decision{Outcome: strategy.OutcomeReplace, Message: pm.Reason}
		}
		return &strategy.Decision{Outcome: strategy.OutcomeNoChange}
	}
	machine := func(name string) strategy.Machine {
		pm := byName[name]
		var created time.Time
		for _, m := range p.snap.Machines {
			if m.Name == name {
				created = m.CreationTimestamp.Time
				break
			}
		}
		ready := true
		if n := p.snap.Nodes[pm.Node]; n != nil {
			ready = nodeReady(n)
		}
		return strategy.Machine{Name: name, NodeName: pm.Node, Created: created, Ready: ready, Decision: decision(pm)}
	}
	groups := map[string]int{}
	for _, g := range pr.Groups {
		if g.Kind == "MachineDeployment" {
			groups[g.Name] = len(in.Workers)
			grp := strategy.Group{Name: g.Name}
			for _, md := range p.mds {
				if md.Name == g.Name {
					grp.Rollout = strategy.RollingUpdate{MaxSurge: intstrPtr(md.Spec.Rollout.Strategy.RollingUpdate.MaxSurge), MaxUnavailable: intstrPtr(md.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable)}
				}
			}
			in.Workers = append(in.Workers, grp)
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		pm := byName[n]
		switch {
		case pm.Group == GroupControlPlane:
			in.ControlPlane = append(in.ControlPlane, machine(n))
		case pm.Group != "":
			gi := groups[pm.Group]
			in.Workers[gi].Machines = append(in.Workers[gi].Machines, machine(n))
		}
	}
	plan, err := p.o.planner.Plan(p.ctx, in)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	groupIndex := map[string]int{}
	for i, g := range pr.Groups {
		groupIndex[g.Name] = i
	}
	for _, b := range plan.Batches {
		name := b.Group
		if b.Phase == strategy.PhaseControlPlane {
			name = GroupControlPlane
		}
		gi, ok := groupIndex[name]
		if !ok {
			continue
		}
		g := &pr.Groups[gi]
		g.Waves++
		var longest time.Duration
		for _, n := range b.Machines {
			pm := byName[n]
			pm.Wave = g.Waves
			pm.Estimate = p.o.timings.of(pm)
			longest = max(longest, pm.Estimate)
			pr.Machines = append(pr.Machines, *pm)
			seen[n] = true
		}
		g.Estimate += longest
	}
	var cp, workers time.Duration
	for _, g := range pr.Groups {
		if g.Kind == "KubeadmControlPlane" {
			cp = g.Estimate
		} else {
			workers = max(workers, g.Estimate)
		}
	}
	pr.ControlPlaneFirst = p.topologyUpgrade
	if p.topologyUpgrade {
		pr.Estimate = cp + workers
	} else {
		pr.Estimate = max(cp, workers)
	}
	for _, n := range names {
		if !seen[n] {
			pr.Machines = append(pr.Machines, *byName[n])
		}
	}
	return nil
}

func intstrPtr(v *intstr.IntOrString) *intstr.IntOrString {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}

// onFailure is what Cluster API v1.14 does with g when an in-place update
// of one of its machines fails: it keeps the Machine updating
// (InPlaceUpdateFailed), so unavailable, and calls UpdateMachine again.
func (p *predictor) onFailure(g *Group, byName map[string]*Machine) string {
	if !slices.ContainsFunc(p.members[g.Name], func(n string) bool { return byName[n].Method == strategy.MethodInPlace }) {
		return ""
	}
	if g.Kind == "KubeadmControlPlane" {
		return "if an update fails, KubeadmControlPlane waits for that machine and touches no other until it is through (the retry annotation, or deleting the machine, gets it going)"
	}
	for _, md := range p.mds {
		if md.Name != g.Name {
			continue
		}
		limit := mdutil.MaxSurge(*md) + mdutil.MaxUnavailable(*md)
		s := fmt.Sprintf("if an update fails, its machine stays unavailable while Cluster API retries it, and the MachineDeployment goes on only within maxSurge+maxUnavailable (%d)", limit)
		if limit <= 1 {
			s += ": nothing else moves"
		}
		return s
	}
	return ""
}

// summarize counts a group's machines by method.
func summarize(owned []string, byName map[string]*Machine, surge int) string {
	count := map[strategy.Method]int{}
	for _, m := range owned {
		count[byName[m].Method]++
	}
	var parts []string
	for _, c := range []struct {
		m    strategy.Method
		what string
	}{{strategy.MethodInPlace, "in place"}, {strategy.MethodReplace, "replaced"}, {strategy.MethodBlocked, "blocked"}, {strategy.MethodSkip, "unchanged"}} {
		if count[c.m] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[c.m], c.what))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no machines")
	}
	s := strings.Join(parts, ", ")
	if surge > 0 && count[strategy.MethodInPlace]+count[strategy.MethodReplace]+count[strategy.MethodBlocked] > 0 {
		s += fmt.Sprintf("; %d new machine(s) created first (maxSurge)", surge)
	}
	return s
}

// ErrClusterAPI is matched by Predict's error when Cluster API's own code
// (its up-to-date rules) fails on the snapshot, panics included: a
// snapshot built by hand can hold what no API server would store.
var ErrClusterAPI = errors.New("cluster API's rules failed on the snapshot")

// upToDate is kcppkg.UpToDate, its panics turned into errors.
func upToDate(ctx context.Context, c client.Client, cluster *clusterv1.Cluster, m *clusterv1.Machine, kcp *controlplanev1.KubeadmControlPlane,
	now *metav1.Time, infra map[string]*unstructured.Unstructured, configs map[string]*bootstrapv1.KubeadmConfig) (ok bool, res *kcppkg.UpToDateResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: UpToDate of machine %s panicked: %v", ErrClusterAPI, errtext.Quote(m.Name), errtext.Clip(fmt.Sprint(r)))
		}
	}()
	ok, res, err = kcppkg.UpToDate(ctx, c, cluster, m, kcp, now, infra, configs)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrClusterAPI, err)
	}
	return ok, res, err
}

// findMachineSets is mdutil.FindNewAndOldMachineSets, its panics (a
// MachineSet without spec.replicas) turned into errors.
func findMachineSets(md *clusterv1.MachineDeployment, msList []*clusterv1.MachineSet, now metav1.Time) (newMS *clusterv1.MachineSet, oldMSs []*clusterv1.MachineSet, results map[string]mdutil.UpToDateResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: MachineDeployment %s: finding its new and old MachineSets panicked: %v", ErrClusterAPI, errtext.Quote(md.Name), errtext.Clip(fmt.Sprint(r)))
		}
	}()
	newMS, oldMSs, results, _ = mdutil.FindNewAndOldMachineSets(md, msList, now)
	return newMS, oldMSs, results, nil
}
