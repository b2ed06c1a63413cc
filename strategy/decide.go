package strategy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// ErrInvalidRule is matched (errors.Is) by the errors of rules and updaters
// that cannot be used: no selector, a bad path pattern, an unknown action or
// updater, an empty name, two rules that select the same changes with
// different actions.
var ErrInvalidRule = errors.New("invalid rule")

// Updater is something that can apply some changes to a machine without
// replacing it: a Kubernetes version updater, a files updater, an etcd
// updater. It declares which changes it covers.
type Updater interface {
	// Name identifies the updater in decisions and messages.
	Name() string
	// Covers reports whether the updater can apply the change in place.
	Covers(c diff.Change) bool
}

type funcUpdater struct {
	name   string
	covers func(c diff.Change) bool
}

func (u funcUpdater) Name() string              { return u.name }
func (u funcUpdater) Covers(c diff.Change) bool { return u.covers(c) }

// NewUpdater adapts a function to an Updater, as http.HandlerFunc adapts
// a function to a Handler.
func NewUpdater(name string, covers func(c diff.Change) bool) (Updater, error) {
	if name == "" || covers == nil {
		return nil, fmt.Errorf("%w: updater needs a name and a coverage function", ErrInvalidRule)
	}
	return funcUpdater{name: name, covers: covers}, nil
}

// ForCategories is an updater covering every change of the given
// categories, which must be built in (diff.BuiltinCategories): a typo
// ("KubernetesVerison") would otherwise cover nothing, silently, and every
// machine would be replaced. Unknown categories are an ErrInvalidRule
// naming the category and listing the built-in ones. For categories of your own diff.Categorize rules
// use ForCustomCategories.
func ForCategories(name string, cats ...diff.Category) (Updater, error) {
	builtin := diff.BuiltinCategories()
	for _, c := range cats {
		if !slices.Contains(builtin, c) {
			return nil, &unknownCategoryError{Updater: name, Category: c, Valid: builtin}
		}
	}
	return ForCustomCategories(name, cats...)
}

// ForCustomCategories is ForCategories without the check that each
// category is built in: for updaters of categories that your own
// diff.Categorize rules assign.
func ForCustomCategories(name string, cats ...diff.Category) (Updater, error) {
	if len(cats) == 0 {
		return nil, fmt.Errorf("%w: updater %s: no categories", ErrInvalidRule, errtext.Quote(name))
	}
	set := map[diff.Category]bool{}
	for _, c := range cats {
		if c == "" {
			return nil, fmt.Errorf("%w: updater %s: empty category", ErrInvalidRule, errtext.Quote(name))
		}
		set[c] = true
	}
	return NewUpdater(name, func(c diff.Change) bool { return set[c.Category] })
}

// unknownCategoryError is ForCategories' error for a category that is not
// built in. It unwraps to ErrInvalidRule.
type unknownCategoryError struct {
	// Updater is the updater's name.
	Updater string
	// Category is the unknown category.
	Category diff.Category
	// Valid lists the built-in categories.
	Valid []diff.Category
}

// Error implements error.
func (e *unknownCategoryError) Error() string {
	valid := make([]string, len(e.Valid))
	for i, c := range e.Valid {
		valid[i] = string(c)
	}
	return fmt.Sprintf("%v: updater %s: unknown category %s (valid: %s; use ForCustomCategories for categories of your own Categorize rules)",
		ErrInvalidRule, errtext.Quote(e.Updater), errtext.Quote(string(e.Category)), strings.Join(valid, ", "))
}

// Unwrap returns ErrInvalidRule.
func (e *unknownCategoryError) Unwrap() error { return ErrInvalidRule }

// KubeadmCategories are the changes upgradekit's kubeadm executor (the
// kubeadm plans of package nodeexec/kubeadm, run by strategy/capi's
// MachineUpdater) applies to a running node and verifies afterwards: the
// Kubernetes version, today only that (kubelet extra arguments are applied
// too, but they are paths, not a category: KubeletExtraArgsPaths). A
// change of the rest of the kubelet's configuration, of the kubeadm
// ClusterConfiguration (etcd image, API server arguments), of
// addons or of files at the same version has no executor yet, so it is not
// in this set: accepting it would let Cluster API mark the machine up to
// date while the node keeps its old configuration. Such changes are
// declined and the machine is replaced.
//
// The contract every default here keeps: a category is in a default
// accepted set only if an executor applies it and verifies it on the node.
func KubeadmCategories() []diff.Category {
	return []diff.Category{diff.CategoryKubernetesVersion}
}

// KubeletExtraArgsPaths are the KubeadmConfig fields of the kubelet's
// extra arguments (nodeRegistration.kubeletExtraArgs of the init and join
// configurations), in diff's path syntax. strategy/capi's MachineUpdater
// applies them in place (kubeadm.NewKubeletArgsPlan: kubeadm-flags.env
// rewritten as `kubeadm join` writes it, the kubelet restarted and its
// running command line verified), so an updater covering them keeps the
// in-place contract when paired with that MachineUpdater:
//
//	kubeletArgs, _ := strategy.ForPaths("kubelet-args", strategy.KubeletExtraArgsPaths()...)
//
// The rest of nodeRegistration (taints, criSocket, name...) and
// kubeletConfiguration have no executor and stay declined.
func KubeletExtraArgsPaths() []string {
	return []string{
		"bootstrap.spec.initConfiguration.nodeRegistration.kubeletExtraArgs",
		"bootstrap.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs",
	}
}

// FilesPaths are the KubeadmConfig files (bootstrap.spec.files), which
// strategy/capi's MachineUpdater writes in place (kubeadm.NewFilesPlan:
// content, mode and owner, verified by SHA-256, mode and owner) when the
// content is inline. Its Extension's FilesCheck declines a change of a file
// it cannot write (content from a Secret, append, a template, a path outside
// kubeadm.DefaultFilesAllowedDirs or kubeadm's own, a setuid or writable
// mode, more than an upgrader pod carries), so an updater covering them
// keeps the in-place contract when paired with that MachineUpdater:
//
//	files, _ := strategy.ForPaths("files", strategy.FilesPaths()...)
//
// A file removed from the KubeadmConfig stays on the node (cloud-init does
// not delete files either), and nothing is restarted after a write.
func FilesPaths() []string {
	return []string{"bootstrap.spec.files"}
}

// ControlPlaneConfigPaths are the KubeadmConfig ClusterConfiguration
// fields strategy/capi's MachineUpdater applies in place on control plane
// nodes and verifies in their static pod manifests: the API server,
// controller-manager and scheduler extra arguments, and local etcd's image
// tag and extra arguments (kubeadm.NewControlPlaneConfigPlan, after
// KubeadmControlPlane has written them into kubeadm-config). On workers
// kubeadm join does not read ClusterConfiguration, so there is nothing to
// apply. The rest of ClusterConfiguration (certSANs, networking, DNS,
// extra volumes...) has no executor and stays declined.
//
//	cp, _ := strategy.ForPaths("control-plane-config", strategy.ControlPlaneConfigPaths()...)
func ControlPlaneConfigPaths() []string {
	return []string{
		"bootstrap.spec.clusterConfiguration.apiServer.extraArgs",
		"bootstrap.spec.clusterConfiguration.controllerManager.extraArgs",
		"bootstrap.spec.clusterConfiguration.scheduler.extraArgs",
		"bootstrap.spec.clusterConfiguration.etcd.local.imageTag",
		"bootstrap.spec.clusterConfiguration.etcd.local.extraArgs",
	}
}

// ForPaths is an updater covering changes at or below the given path
// patterns, in diff's syntax ("bootstrap.spec.files",
// "infrastructure(AWSMachine).spec.ami").
func ForPaths(name string, patterns ...string) (Updater, error) {
	if len(patterns) == 0 {
		return nil, fmt.Errorf("%w: updater %s: no paths", ErrInvalidRule, errtext.Quote(name))
	}
	ps := make([]diff.Pattern, 0, len(patterns))
	for _, s := range patterns {
		p, err := diff.ParsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("%w: updater %s: %w", ErrInvalidRule, errtext.Quote(name), err)
		}
		ps = append(ps, p)
	}
	return NewUpdater(name, func(c diff.Change) bool {
		for _, p := range ps {
			if p.Match(c) {
				return true
			}
		}
		return false
	})
}

// Outcome is a Decider's answer for one machine, in a Decision: can all of
// its changes be applied in place (OutcomeInPlace, Cluster API: accept),
// does it need replacing (OutcomeReplace: decline), or is there nothing to do.
// It says what is possible; the Method a Strategy then picks says what happens.
type Outcome string

const (
	// OutcomeNoChange: nothing to do.
	OutcomeNoChange Outcome = "NoChange"
	// OutcomeInPlace: every change is covered by an updater (CAPI: accept).
	OutcomeInPlace Outcome = "InPlace"
	// OutcomeReplace: some change cannot be applied in place (CAPI: decline).
	OutcomeReplace Outcome = "Replace"
)

// Coverage names the updater that applies a change.
type Coverage struct {
	// Change is the change covered: it points at the change's entry in
	// the Decision's InPlace set (an edit through one shows in the
	// other), so a Decision holds each change once.
	Change *diff.Change
	// Updater is the name of the updater applying it.
	Updater string
}

// Decision is the answer for one machine.
type Decision struct {
	// Outcome is NoChange, InPlace or Replace.
	Outcome Outcome
	// Coverage lists, for every change applied in place, its updater.
	Coverage []Coverage
	// InPlace holds the changes applied in place; its patches are what a
	// CanUpdateMachine response carries.
	InPlace diff.ChangeSet
	// Uncovered holds the changes no updater covers (or a rule sends to
	// replacement): the reasons for Replace.
	Uncovered diff.ChangeSet
	// Ignored holds changes a policy said to ignore.
	Ignored diff.ChangeSet
	// Message explains the outcome, naming uncovered fields, and ends with
	// Warning's text when there is one.
	Message string
	// Warning is set when the change set is not one Cluster API would act
	// on: an error (errors.Is ErrUnsuitableDiff) naming the
	// changes to fields a provider or Cluster API assigns (diff.AssignedPaths:
	// providerID, instance IDs, the names of the machine's own objects), which
	// a diff without a preset reports for a machine built from templates and
	// Cluster API never sees differ (its desired objects carry them over from
	// the running machine). The outcome is then likely not Cluster API's:
	// diff with diff.InPlaceProposal.
	Warning error
}

// ErrUnsuitableDiff is matched (errors.Is) by a Decision's Warning when
// the change set holds changes Cluster API never counts.
var ErrUnsuitableDiff = errors.New("change set unsuitable for an in-place decision")

// unsuitableDiffError names the changes that make a change set unsuitable
// for deciding as Cluster API does: changes to the fields of
// diff.AssignedPaths, which a running machine has and a machine built from
// templates lacks. It unwraps to ErrUnsuitableDiff.
type unsuitableDiffError struct {
	// Fields are the assigned fields that differ, as diff names them.
	Fields []string
}

// Error names the fields and the preset that leaves them out.
func (e *unsuitableDiffError) Error() string {
	return fmt.Sprintf("%v: it compares %s, which a provider or Cluster API assigns to a running machine "+
		"(Cluster API's own desired objects carry them over, a machine built from templates lacks them); "+
		"diff with diff.InPlaceProposal() (or diff.InPlaceUpdate() for a Cluster API request's objects)",
		ErrUnsuitableDiff, strings.Join(e.Fields, ", "))
}

// Unwrap returns ErrUnsuitableDiff.
func (e *unsuitableDiffError) Unwrap() error { return ErrUnsuitableDiff }

// assignedPatterns are diff.AssignedPaths, parsed once.
var assignedPatterns = sync.OnceValue(func() []diff.Pattern {
	var ps []diff.Pattern
	for _, s := range diff.AssignedPaths() {
		if p, err := diff.ParsePattern(s); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
})

// unsuitable returns an *unsuitableDiffError for the changes of sets at
// assigned fields, or nil.
func unsuitable(sets ...diff.ChangeSet) error {
	var fields []string
	for _, cs := range sets {
		for _, c := range cs.Changes {
			for _, p := range assignedPatterns() {
				if p.Match(c) {
					fields = append(fields, c.Field)
					break
				}
			}
		}
	}
	if len(fields) == 0 {
		return nil
	}
	return &unsuitableDiffError{Fields: fields}
}

// Updaters returns the updaters that cover at least one change, in first-use
// order.
func (d Decision) Updaters() []string {
	var out []string
	for i, c := range d.Coverage {
		if firstUse(d.Coverage, i) {
			out = append(out, c.Updater)
		}
	}
	return out
}

// Decider decides how one machine's changes are applied.
type Decider interface {
	Decide(ctx context.Context, cs diff.ChangeSet) (Decision, error)
}

// DeciderFunc adapts a function to a Decider.
type DeciderFunc func(ctx context.Context, cs diff.ChangeSet) (Decision, error)

// Decide calls f; a nil f is an ErrInvalidStrategy error.
func (f DeciderFunc) Decide(ctx context.Context, cs diff.ChangeSet) (Decision, error) {
	if f == nil {
		return Decision{}, fmt.Errorf("%w: nil DeciderFunc", ErrInvalidStrategy)
	}
	return f(ctx, cs)
}

// Updaters composes updaters behind one Decider: each change goes to the
// first updater, in order, that covers it; the machine is updated in place
// only if every change is covered. CAPI lets one extension answer; this is
// how several updaters answer as one.
func Updaters(us ...Updater) Decider {
	return updaterList(us)
}

// updaterList is the Decider Updaters builds. It is a named type rather
// than a DeciderFunc so that the planner can recognize it (scratchDecider).
type updaterList []Updater

// Decide decides cs with the updaters; the Decision owns its change sets.
func (us updaterList) Decide(ctx context.Context, cs diff.ChangeSet) (Decision, error) {
	return us.decideInto(ctx, cs, nil)
}

func (us updaterList) decideInto(ctx context.Context, cs diff.ChangeSet, sc *decideScratch) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	return assign(cs, func(c diff.Change) (action Action, updater string) {
		for _, u := range us {
			if u != nil && u.Covers(c) {
				return ActionInPlace, u.Name()
			}
		}
		return ActionReplace, ""
	}, sc), nil
}

// scratchDecider is a Decider of this package that can build its Decision
// in a decideScratch: the Decision's change sets and Coverage then live in
// the scratch's arrays, which the next decideInto with the same scratch
// overwrites. The planner uses it only when nothing but its own code and
// the strategies of this package see the Decision (scratchSafe), so the
// Decide contract (a Decision owns its change sets) holds wherever user
// code can observe it.
type scratchDecider interface {
	Decider
	decideInto(ctx context.Context, cs diff.ChangeSet, sc *decideScratch) (Decision, error)
}

// decideScratch holds the arrays assign reuses from machine to machine
// when it is given one: one per Plan call, never shared between
// goroutines.
type decideScratch struct {
	changes  []diff.Change
	coverage []Coverage
	actions  []Action
	updaters []string
}

// assign sorts each change by route and builds the decision. With sc nil
// the Decision owns its change sets; otherwise they, and Coverage, are
// built in sc's arrays and are valid until the next assign with sc.
func assign(cs diff.ChangeSet, route func(diff.Change) (Action, string), sc *decideScratch) Decision {
	var d Decision
	n := len(cs.Changes)
	// Routes and updater names for a machine's few changes live on the
	// stack; a machine with more takes one allocation for each (or reuses
	// the scratch's).
	var actBuf [8]Action
	var updBuf [8]string
	actions, updaters := actBuf[:0], updBuf[:0]
	switch {
	case n <= len(actBuf):
	case sc != nil:
		if cap(sc.actions) < n {
			sc.actions, sc.updaters = make([]Action, 0, n), make([]string, 0, n)
		}
		actions, updaters = sc.actions[:0], sc.updaters[:0]
	default:
		actions, updaters = make([]Action, 0, n), make([]string, 0, n)
	}
	var inPlace, replace, ignore int
	for _, c := range cs.Changes {
		a, u := route(c)
		actions, updaters = append(actions, a), append(updaters, u)
		switch a {
		case ActionInPlace:
			inPlace++
		case ActionReplace:
			replace++
		case ActionIgnore:
			ignore++
		}
	}
	// The three change sets share one array, each capped at its own
	// length so that appending to one never writes into the next.
	var all []diff.Change
	if total := inPlace + replace + ignore; total > 0 {
		if sc == nil {
			all = make([]diff.Change, 0, total)
		} else {
			if cap(sc.changes) < total {
				sc.changes = make([]diff.Change, 0, max(total, 2*cap(sc.changes)))
			}
			all = sc.changes[:0]
		}
	}
	for _, want := range [...]Action{ActionInPlace, ActionReplace, ActionIgnore} {
		start := len(all)
		for i, c := range cs.Changes {
			if actions[i] == want {
				all = append(all, c)
			}
		}
		part := cs // keeps what the set carries besides its changes
		part.Changes = nil
		if len(all) > start {
			part.Changes = all[start:len(all):len(all)]
		}
		switch want {
		case ActionInPlace:
			d.InPlace = part
		case ActionReplace:
			d.Uncovered = part
		default:
			d.Ignored = part
		}
	}
	if inPlace > 0 {
		// Coverage points into InPlace, whose changes are the in-place
		// routes in input order.
		if sc == nil {
			d.Coverage = make([]Coverage, 0, inPlace)
		} else {
			if cap(sc.coverage) < inPlace {
				sc.coverage = make([]Coverage, 0, max(inPlace, 2*cap(sc.coverage)))
			}
			d.Coverage = sc.coverage[:0:inPlace]
		}
		k := 0
		for i := range cs.Changes {
			if actions[i] == ActionInPlace {
				d.Coverage = append(d.Coverage, Coverage{Change: &d.InPlace.Changes[k], Updater: updaters[i]})
				k++
			}
		}
	}
	switch {
	case d.Uncovered.Len() > 0:
		d.Outcome = OutcomeReplace
		d.Message = declineMessage(d.Uncovered)
	case d.InPlace.Len() > 0:
		d.Outcome = OutcomeInPlace
		d.Message = inPlaceMessage(d.Coverage, d.InPlace)
	default:
		d.Outcome = OutcomeNoChange
		d.Message = "no changes"
	}
	if w := unsuitable(d.InPlace, d.Uncovered); w != nil {
		d.Warning = w
		d.Message += "; " + w.Error()
	}
	return d
}

// The messages are built in a buffer on the stack and copied into their
// string once: a plan makes one per machine.

func declineMessage(uncovered diff.ChangeSet) string {
	noun := " changes not covered: "
	if uncovered.Len() == 1 {
		noun = " change not covered: "
	}
	var buf [256]byte
	b := append(buf[:0], "cannot update in place: "...)
	b = strconv.AppendInt(b, int64(uncovered.Len()), 10)
	b = append(b, noun...)
	return string(appendFieldList(b, uncovered, true))
}

// inPlaceMessage names the updaters, in first-use order, and the fields.
func inPlaceMessage(coverage []Coverage, inPlace diff.ChangeSet) string {
	var buf [256]byte
	b := append(buf[:0], "in place by "...)
	for i, c := range coverage {
		if firstUse(coverage, i) {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, c.Updater...)
		}
	}
	b = append(b, ": "...)
	return string(appendFieldList(b, inPlace, false))
}

// firstUse reports whether coverage[i] is its updater's first entry. A
// machine has a few changes and fewer updaters: a scan beats a map.
func firstUse(coverage []Coverage, i int) bool {
	for _, c := range coverage[:i] {
		if c.Updater == coverage[i].Updater {
			return false
		}
	}
	return true
}

// appendFieldList appends up to ten changed fields' names to b, with
// categories when asked.
func appendFieldList(b []byte, cs diff.ChangeSet, categories bool) []byte {
	const show = 10
	for i, c := range cs.Changes {
		if i > 0 {
			b = append(b, ", "...)
		}
		if i == show {
			b = append(b, "and "...)
			b = strconv.AppendInt(b, int64(cs.Len()-show), 10)
			return append(b, " more"...)
		}
		b = append(b, c.Field...)
		if categories {
			b = append(b, " ("...)
			b = append(b, c.Category...)
			b = append(b, ')')
		}
	}
	return b
}
