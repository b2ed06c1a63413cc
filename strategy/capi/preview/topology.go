package preview

// This file predicts a managed topology's version change as Cluster API's
// topology controller carries it out: the upgrade plan (the versions the
// control plane and the workers go through), and a view of the management
// cluster as it will be when each question of the plan is asked.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// upgradePlan mirrors Cluster API v1.14's topology upgrade plan
// (exp/topology/desiredstate: GetUpgradePlanOneMinor, or
// GetUpgradePlanFromClusterClassVersions when the ClusterClass lists
// spec.kubernetesVersions, then DefaultAndValidateUpgradePlans): the
// versions the control plane goes through from cp to desired, one minor
// at a time, and the fewest worker steps from minWorkers ("" without
// workers) that keep workers within three minors of the control plane.
// Versions that differ only in build metadata are ordered as Cluster
// API's util/version.Compare with WithBuildTags orders them. Cluster API
// also counts MachinePools among the workers; the preview reads none.
// TestUpgradePlanIsClusterAPIs holds it to Cluster API's own functions.
func upgradePlan(classVersions []string, desired, cp, minWorkers string) (cpPlan, workersPlan []string, err error) {
	want, err := version.ParseSemantic(desired)
	if err != nil {
		return nil, nil, fmt.Errorf("spec.topology.version %q: %w", desired, err)
	}
	cur, err := version.ParseSemantic(cp)
	if err != nil {
		return nil, nil, fmt.Errorf("control plane spec.version %q: %w", cp, err)
	}
	var workers *version.Version
	if minWorkers != "" {
		if workers, err = version.ParseSemantic(minWorkers); err != nil {
			return nil, nil, fmt.Errorf("MachineDeployment spec.template.spec.version %q: %w", minWorkers, err)
		}
	}
	if cur.String() == want.String() && (workers == nil || workers.String() == want.String()) {
		return nil, nil, nil
	}
	if cur.String() != want.String() {
		if len(classVersions) == 0 {
			if want.Minor() > cur.Minor()+1 {
				return nil, nil, fmt.Errorf("no upgrade plan from %s to %s without the ClusterClass's spec.kubernetesVersions: Cluster API goes one minor at a time", cp, desired)
			}
			cpPlan = []string{desired}
		} else {
			var candidates []string
			for _, s := range classVersions {
				v, err := version.ParseSemantic(s)
				if err != nil {
					return nil, nil, fmt.Errorf("ClusterClass spec.kubernetesVersions: %q: %w", s, err)
				}
				if cmpVersions(v, cur) <= 0 {
					continue
				}
				if cmpBuild(v, want) == 1 {
					break
				}
				candidates = append(candidates, s)
				if v.String() == want.String() {
					break
				}
			}
			minor := cur.Minor()
			if len(candidates) > 0 && minor == want.Minor() {
				cpPlan = append(cpPlan, candidates[0])
			}
			for _, s := range candidates {
				v := version.MustParseSemantic(s)
				if v.Minor() > minor {
					cpPlan = append(cpPlan, s)
				}
				if v.Minor() == minor && len(cpPlan) > 0 {
					cpPlan[len(cpPlan)-1] = s
				}
				minor = v.Minor()
			}
		}
	}
	// DefaultAndValidateUpgradePlans: one minor at a time, ending at the
	// desired version.
	if cmpBuild(cur, want) != 0 {
		at := cur
		for i, s := range cpPlan {
			v := version.MustParseSemantic(s)
			if c := cmpBuild(v, at); c == -1 || c == 0 {
				return nil, nil, fmt.Errorf("invalid control plane upgrade plan %v: item %d, %s, is not above %s", cpPlan, i, s, at)
			}
			if v.Minor() != at.Minor() && v.Minor() != at.Minor()+1 {
				return nil, nil, fmt.Errorf("invalid control plane upgrade plan %v: item %d, %s, skips a minor after v%s (the ClusterClass's spec.kubernetesVersions has no version in between)", cpPlan, i, s, at)
			}
			at = v
		}
		if cmpBuild(at, want) != 0 {
			return nil, nil, fmt.Errorf("invalid control plane upgrade plan %v: it does not reach %s (is it in the ClusterClass's spec.kubernetesVersions?)", cpPlan, desired)
		}
	} else if len(cpPlan) > 0 {
		return nil, nil, fmt.Errorf("invalid control plane upgrade plan %v: the control plane is at %s already", cpPlan, desired)
	}
	if workers == nil || cmpBuild(workers, want) == 0 {
		return cpPlan, nil, nil
	}
	minors := map[uint]string{cur.Minor(): cp}
	for _, s := range cpPlan {
		minors[version.MustParseSemantic(s).Minor()] = s
	}
	for i := uint(1); workers.Minor()+i < want.Minor(); i++ {
		if i%3 == 0 {
			s, ok := minors[workers.Minor()+i]
			if !ok {
				return nil, nil, fmt.Errorf("invalid upgrade plan: no version for minor %d", workers.Minor()+i)
			}
			workersPlan = append(workersPlan, s)
		}
	}
	if len(workersPlan) == 0 || workersPlan[len(workersPlan)-1] != desired {
		workersPlan = append(workersPlan, desired)
	}
	// The workers' steps go up, at most three minors at a time; versions
	// that differ only in build metadata in the control plane's order.
	order := map[string]int{"v" + cur.String(): -1}
	for i, s := range cpPlan {
		order["v"+version.MustParseSemantic(s).String()] = i
	}
	at := workers
	for i, s := range workersPlan {
		v := version.MustParseSemantic(s)
		switch c := cmpBuild(v, at); c {
		case -1, 0:
			return nil, nil, fmt.Errorf("invalid workers upgrade plan %v: item %d, %s, is not above %s", workersPlan, i, s, at)
		case 2:
			to, ok := order["v"+v.String()]
			from, known := order["v"+at.String()]
			if !ok || !known || to < from {
				return nil, nil, fmt.Errorf("invalid workers upgrade plan %v: item %d, %s, cannot be ordered after v%s", workersPlan, i, s, at)
			}
		}
		if v.Minor() > at.Minor()+3 {
			return nil, nil, fmt.Errorf("invalid workers upgrade plan %v: item %d, %s, is more than three minors above %s", workersPlan, i, s, at)
		}
		at = v
	}
	return cpPlan, workersPlan, nil
}

// cmpVersions is -1, 0 or 1 as a is below, at or above b, build metadata
// aside.
func cmpVersions(a, b *version.Version) int {
	switch {
	case a.LessThan(b):
		return -1
	case b.LessThan(a):
		return 1
	}
	return 0
}

// cmpVersionStrings is cmpVersions of two versions as strings; one that
// does not parse is below the other.
func cmpVersionStrings(a, b string) int {
	x, xerr := version.ParseSemantic(a)
	y, yerr := version.ParseSemantic(b)
	switch {
	case xerr != nil && yerr != nil:
		return 0
	case xerr != nil:
		return -1
	case yerr != nil:
		return 1
	}
	return cmpVersions(x, y)
}

// cmpBuild is Cluster API's util/version.Compare with WithBuildTags:
// cmpVersions, then the build metadata's dot-separated identifiers left
// to right (numbers by value and below words; different words: 2, no
// order), the longer list above when one is a prefix of the other.
func cmpBuild(a, b *version.Version) int {
	if c := cmpVersions(a, b); c != 0 {
		return c
	}
	var x, y []string
	if m := a.BuildMetadata(); m != "" {
		x = strings.Split(m, ".")
	}
	if m := b.BuildMetadata(); m != "" {
		y = strings.Split(m, ".")
	}
	for i := 0; i < len(x) && i < len(y); i++ {
		xn, xerr := strconv.ParseUint(x[i], 10, 64)
		yn, yerr := strconv.ParseUint(y[i], 10, 64)
		switch {
		case xerr == nil && yerr != nil:
			return -1
		case xerr != nil && yerr == nil:
			return 1
		case xerr == nil && yerr == nil && xn != yn:
			if xn < yn {
				return -1
			}
			return 1
		case xerr != nil && yerr != nil && x[i] != y[i]:
			return 2
		}
	}
	switch {
	case len(x) == len(y):
		return 0
	case len(x) < len(y):
		return -1
	}
	return 1
}

// topologyPlan reads the Cluster's ClusterClass and computes the upgrade
// plan from the live control plane and MachineDeployments to version to.
func (p *predictor) topologyPlan(to string) error {
	cluster := p.snap.Cluster
	var cc clusterv1.ClusterClass
	var classVersions []string
	switch err := p.mgmt.Get(p.ctx, cluster.GetClassKey(), &cc); {
	case apierrors.IsNotFound(err):
		p.notes = append(p.notes, fmt.Sprintf("ClusterClass %s not found: the upgrade plan assumes it lists no spec.kubernetesVersions", cluster.GetClassKey()))
	case err != nil:
		return fmt.Errorf("preview: read ClusterClass %s: %w", cluster.GetClassKey(), err)
	default:
		if ext := cc.Spec.Upgrade.External.GenerateUpgradePlanExtension; ext != "" {
			return fmt.Errorf("%w: ClusterClass %s plans its upgrades with the GenerateUpgradePlan extension %q, which the preview does not call", ErrInvalidChange, cc.Name, ext)
		}
		classVersions = cc.Spec.KubernetesVersions
	}
	cp := to
	if p.snap.ControlPlane != nil {
		cp = p.snap.ControlPlane.Spec.Version
	}
	minWorkers := ""
	var low *version.Version
	for _, md := range p.snap.MachineDeployments {
		if _, managed := md.Labels[clusterv1.ClusterTopologyOwnedLabel]; !managed || md.Spec.Template.Spec.Version == "" {
			continue
		}
		v, err := version.ParseSemantic(md.Spec.Template.Spec.Version)
		if err != nil {
			return fmt.Errorf("preview: MachineDeployment %s: spec.template.spec.version %q: %w", md.Name, md.Spec.Template.Spec.Version, err)
		}
		if low == nil || lowerWorkers(v, low, cp) {
			low, minWorkers = v, md.Spec.Template.Spec.Version
		}
	}
	cpPlan, workersPlan, err := upgradePlan(classVersions, to, cp, minWorkers)
	if err != nil {
		return fmt.Errorf("%w: Cluster %s: %w", ErrInvalidChange, cluster.Name, err)
	}
	p.cpPlan, p.workersPlan = cpPlan, workersPlan
	return nil
}

// lowerWorkers mirrors Cluster API's isLowerThanMinVersion: v is below
// low, or differs from it in build metadata only and is not the control
// plane's version cp.
func lowerWorkers(v, low *version.Version, cp string) bool {
	switch cmpBuild(v, low) {
	case -1:
		return true
	case 2:
		c, err := version.ParseSemantic(cp)
		return err != nil || v.String() != c.String()
	}
	return false
}

// InProcess is an Answerer that runs in the caller's process, built over
// a reader of the management cluster. Predict builds it again over the
// cluster as it will be when Cluster API asks each question of a managed
// topology's upgrade (the control plane at each version of the upgrade
// plan, the machines at the version of the step before), so checks that
// read the cluster, as capi.ControlPlaneSkewCheck does, answer as they
// will then. Any other Answerer, a Deployed one included, is asked over
// the cluster as it is now, and Predict says so on the machines whose
// answer may differ.
type InProcess struct {
	mgmt  client.Reader
	build func(mgmt client.Reader) (Answerer, error)
	now   Answerer
}

// NewInProcess builds an InProcess answerer: build makes an Answerer over
// a management cluster reader (for upgradekit's extension,
// extensionserver.New's Extension). It is called once over mgmt now, and
// by Predict once per step of a managed topology's upgrade.
func NewInProcess(mgmt client.Reader, build func(mgmt client.Reader) (Answerer, error)) (*InProcess, error) {
	if mgmt == nil || build == nil {
		return nil, fmt.Errorf("%w: NewInProcess needs a management reader and a build function", ErrInvalidArgument)
	}
	a, err := build(mgmt)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, fmt.Errorf("%w: NewInProcess: build returned no answerer", ErrInvalidArgument)
	}
	return &InProcess{mgmt: mgmt, build: build, now: a}, nil
}

// errNoInProcess is the error of an InProcess not made by NewInProcess.
var errNoInProcess = fmt.Errorf("%w: an InProcess answerer is made by NewInProcess", ErrInvalidArgument)

// AnswerCanUpdateMachine answers over the management cluster as it is.
func (a *InProcess) AnswerCanUpdateMachine(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest) (capi.Answer, error) {
	if a == nil || a.now == nil {
		return capi.Answer{}, errNoInProcess
	}
	return a.now.AnswerCanUpdateMachine(ctx, req)
}

// AnswerCanUpdateMachineSet answers over the management cluster as it is.
func (a *InProcess) AnswerCanUpdateMachineSet(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest) (capi.Answer, error) {
	if a == nil || a.now == nil {
		return capi.Answer{}, errNoInProcess
	}
	return a.now.AnswerCanUpdateMachineSet(ctx, req)
}

// over builds the answerer again over view.
func (a *InProcess) over(view client.Reader) (Answerer, error) {
	if a == nil || a.build == nil {
		return nil, errNoInProcess
	}
	ans, err := a.build(view)
	if err != nil {
		return nil, fmt.Errorf("preview: building the in-process answerer: %w", err)
	}
	if ans == nil {
		return nil, fmt.Errorf("%w: InProcess: build returned no answerer", ErrInvalidArgument)
	}
	return ans, nil
}

// futureView reads the management cluster as it will be at a step of a
// managed topology's upgrade: the objects it holds (the control plane at
// the step's version, machines and MachineSets at the version of the step
// before) in place of the live ones, for Get at the version they are
// held at. Lists, and what goes to the API server (dry runs), are the
// live cluster's: what the view does not model is every other object's
// change along the way (a Machine's conditions while it updates,
// replacements' new Machines).
type futureView struct {
	client.Client
	objs map[viewKey]client.Object
}

type viewKey struct {
	gk       schema.GroupKind
	ns, name string
}

// newFutureView is a view over mgmt holding objs (typed objects of mgmt's
// scheme, or unstructured ones with their kind set).
func newFutureView(mgmt client.Client, objs ...client.Object) (*futureView, error) {
	v := &futureView{Client: mgmt, objs: map[viewKey]client.Object{}}
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, mgmt.Scheme())
		if err != nil {
			return nil, fmt.Errorf("preview: %T %s: %w", o, o.GetName(), err)
		}
		v.objs[viewKey{gvk.GroupKind(), o.GetNamespace(), o.GetName()}] = o
	}
	return v, nil
}

// Get returns the view's object where it holds one at the version asked,
// the live one otherwise.
func (v *futureView) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, v.Scheme())
	if err != nil {
		return v.Client.Get(ctx, key, obj, opts...)
	}
	held, ok := v.objs[viewKey{gvk.GroupKind(), key.Namespace, key.Name}]
	if ok {
		heldGVK, err := apiutil.GVKForObject(held, v.Scheme())
		ok = err == nil && heldGVK.Version == gvk.Version
	}
	if !ok {
		return v.Client.Get(ctx, key, obj, opts...)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(held)
	if err != nil {
		return err
	}
	m["apiVersion"], m["kind"] = gvk.GroupVersion().String(), gvk.Kind
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, obj)
}

// answerer is who answers a question Cluster API asks with view's objects
// in place of the live ones: an InProcess answerer built again over the
// view, else p.ext over the cluster as it is. later says the question is
// asked only once the cluster has moved on (a previous step done, or the
// control plane at another version); the caveat returned then is added to
// the answer's reason when the answerer reads the cluster as it is now.
func (p *predictor) answerer(view []client.Object, later bool) (Answerer, string, error) {
	kcpAt := ""
	if p.kcp != nil {
		kcpAt = p.kcp.Spec.Version
	}
	for _, o := range view {
		if kcp, ok := o.(*controlplanev1.KubeadmControlPlane); ok {
			kcpAt = kcp.Spec.Version
		}
	}
	ip, ok := p.ext.(*InProcess)
	if !ok {
		if !later {
			return p.ext, "", nil
		}
		return p.ext, fmt.Sprintf(" [answered over the cluster as it is now; Cluster API asks with the control plane at %s, and the answer may differ then]", kcpAt), nil
	}
	differs := len(view) > 1 || later
	if !differs && p.snap.ControlPlane != nil && kcpAt != p.snap.ControlPlane.Spec.Version {
		differs = true
	}
	if !differs {
		return ip, "", nil
	}
	// A view of the control plane alone is the same for every group
	// asked with the control plane at one version: built once.
	_, kcpAlone := view[0].(*controlplanev1.KubeadmControlPlane)
	kcpAlone = kcpAlone && len(view) == 1
	if kcpAlone {
		if a, ok := p.built[kcpAt]; ok {
			return a, "", nil
		}
	}
	v, err := newFutureView(p.mgmt, view...)
	if err != nil {
		return nil, "", err
	}
	a, err := ip.over(v)
	if err != nil {
		return nil, "", err
	}
	if kcpAlone {
		if p.built == nil {
			p.built = map[string]Answerer{}
		}
		p.built[kcpAt] = a
	}
	return a, "", nil
}

// merge folds one step's prediction for a machine into pm: as it is when
// the upgrade has one step, as one of pm.Steps when it is chained.
func merge(pm, step *Machine, chained bool, caveat string) {
	if step.Method == "" {
		return // no MachineSet of the step holds it
	}
	pm.Group, pm.Role, pm.ToVersion = step.Group, step.Role, step.ToVersion
	changes := step.Method == strategy.MethodInPlace || step.Method == strategy.MethodReplace || step.Method == strategy.MethodBlocked
	if changes {
		step.Reason += caveat
	}
	if !chained {
		pm.Method, pm.Reason = step.Method, step.Reason
		pm.Updaters, pm.InPlaceFields, pm.ReplaceFields = step.Updaters, step.InPlaceFields, step.ReplaceFields
		return
	}
	if !changes {
		if len(pm.Steps) == 0 {
			pm.Method, pm.Reason = step.Method, step.Reason
		}
		return
	}
	pm.Steps = append(pm.Steps, Step{FromVersion: step.FromVersion, ToVersion: step.ToVersion, Method: step.Method, Reason: step.Reason, Updaters: step.Updaters})
	for _, u := range step.Updaters {
		if !slices.Contains(pm.Updaters, u) {
			pm.Updaters = append(pm.Updaters, u)
		}
	}
	for _, f := range step.InPlaceFields {
		if !slices.Contains(pm.InPlaceFields, f) {
			pm.InPlaceFields = append(pm.InPlaceFields, f)
		}
	}
	pm.ReplaceFields = append(pm.ReplaceFields, step.ReplaceFields...)
}

// settle sets a chained machine's Method and Reason from its steps.
func settle(pm *Machine) {
	if len(pm.Steps) == 0 {
		return
	}
	var deciding *Step
	for i := range pm.Steps {
		st := &pm.Steps[i]
		switch {
		case st.Method == strategy.MethodBlocked:
			deciding = st
		case st.Method == strategy.MethodReplace && deciding == nil:
			deciding = st
		}
		if deciding != nil && deciding.Method == strategy.MethodBlocked {
			break
		}
	}
	if deciding != nil {
		pm.Method, pm.Reason = deciding.Method, fmt.Sprintf("step %s -> %s: %s", deciding.FromVersion, deciding.ToVersion, deciding.Reason)
		if deciding.Method == strategy.MethodReplace {
			pm.Updaters, pm.InPlaceFields = nil, nil
		}
		return
	}
	via := make([]string, 0, len(pm.Steps))
	for _, st := range pm.Steps {
		via = append(via, st.ToVersion)
	}
	last := pm.Steps[len(pm.Steps)-1]
	pm.Method = strategy.MethodInPlace
	pm.Reason = last.Reason
	if len(pm.Steps) > 1 {
		pm.Reason = fmt.Sprintf("in place %d times (%s -> %s): %s", len(pm.Steps), pm.Steps[0].FromVersion, strings.Join(via, " -> "), last.Reason)
	}
}
