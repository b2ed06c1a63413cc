package capi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// Settings an ExtensionConfig may pass to the extension's in-place hooks.
const (
	// SettingDisabled, "true", makes every CanUpdate* answer decline: a
	// switch to force rolling replacement without redeploying. Cluster API
	// remembers a MachineSet's decline for 24 hours (see the package
	// documentation), so a MachineDeployment asked while it is set goes
	// on by replacement after it is unset.
	SettingDisabled = "upgradekit.io/disabled"
	// SettingIgnore is a comma-separated list of diff path patterns
	// (e.g. "infrastructure.spec.additionalTags") whose changes are
	// accepted without being applied: they are no reason to replace the
	// machine, nothing runs on the node for them, and they are in the
	// answer's patches so that Cluster API's comparison after applying the
	// patches finds nothing left to roll.
	SettingIgnore = "upgradekit.io/ignore"
)

// Extension answers Cluster API's CanUpdateMachine and CanUpdateMachineSet
// runtime hooks with a strategy.Decider: it diffs current against desired with
// CAPI's in-place comparison rules (diff.InPlaceUpdate), decides, and on
// accept returns JSON patches covering exactly the accepted changes, so
// that CAPI's re-diff after applying them is empty. On decline it returns
// no patches and a message naming the uncovered fields; CAPI then rolls the
// machine out instead.
//
// One change counts as part of the Kubernetes version change it comes
// with (category KubernetesVersion, so the updater applying the version
// covers it): KubeadmControlPlane's removal of
// featureGates.ControlPlaneKubeletLocalMode: true when a machine goes from
// v1.35 to v1.36, where kubeadm dropped the gate it had locked on since
// v1.35 and `kubeadm upgrade` keeps the kubelet on the local API server.
// Its addition (v1.30 -> v1.31) stays a ControlPlaneConfig change, which
// no updater applies.
type Extension struct {
	decider  strategy.Decider
	diffOpts []diff.Option
	differ   *diff.Differ
	strict   *diff.Differ // diff.InPlaceUpdate alone, for the self-check
	log      logr.Logger
	metrics  *Metrics
	checks   []Check
	images   ImagesByVersion
	failure  runtimehooksv1.FailurePolicy
	dryRun   client.Client // ExtensionOptions.InfrastructureDryRun
	events   *canUpdateEvents
}

// HandlerTimeoutCanUpdate is the TimeoutSeconds the CanUpdate* handlers
// announce in discovery: a decision reads nothing but the request (and
// the Checks' reads), well within Cluster API's default of 10 seconds.
const HandlerTimeoutCanUpdate = 10 * time.Second

// ExtensionOptions configure NewExtension. The zero value of every field
// is its default.
type ExtensionOptions struct {
	// DiffOptions are added to the in-place comparison (ignored paths,
	// list keys, categories for your infrastructure provider). Default
	// none.
	DiffOptions []diff.Option

	// Logger is the Extension's logger (UpdaterOptions.Logger is
	// MachineUpdater's); by default the request context's logger is used
	// (the runtime server puts controller-runtime's logger there).
	Logger logr.Logger

	// Metrics counts every answer in its observe.MetricDecisions, by hook and
	// outcome (observe.HookAccept, observe.HookDecline, observe.HookError). Default nil: none.
	Metrics *Metrics

	// FailurePolicy is what the CanUpdate* handlers announce in discovery
	// (default runtimehooksv1.FailurePolicyFail: while the extension cannot
	// answer, Cluster API keeps asking and changes nothing).
	// runtimehooksv1.FailurePolicyIgnore makes Cluster API go on without
	// an answer, that is, roll machines out by replacement while the
	// extension is down; for a MachineDeployment it remembers that "no"
	// for 24 hours per MachineSet, so the rollout goes on by replacement
	// after the extension is back.
	FailurePolicy runtimehooksv1.FailurePolicy

	// Checks are feasibility checks, run in order after the built-in
	// checks, which are always on: VersionCheck, then KubeletArgsCheck,
	// then FilesCheck, and, with Images, the check that the target version
	// has an image. A nil check is refused.
	// Default none.
	Checks []Check

	// Images makes the Extension answer a version change to a version that
	// has no upgrader image in it with a Failure (ErrVersionNotConfigured):
	// without one, UpdateMachine could not build the upgrader pod, and the
	// machine would be stranded; once the image is configured, Cluster
	// API's next question is accepted. Give it the map of
	// UpdaterOptions.Images. NewExtension fails on an invalid map. Default
	// nil: every version is accepted.
	Images ImagesByVersion

	// InfrastructureDryRun, when set (default nil: no dry run), makes CanUpdateMachineSet try, before it accepts
	// a change to the infrastructure machine template, the write Cluster API
	// will then make to every infrastructure machine of the MachineSet: a
	// server-side apply of the new template's spec.template.spec as the
	// machine's spec, with dry run, through the provider's admission webhooks
	// and policies. Only accepts that patch the infrastructure template are
	// tried: in practice, changes accepted without being applied
	// (SettingIgnore, a policy's ActionIgnore).
	//
	// Without it, an accepted infrastructure change that the provider refuses
	// (an immutable field) is only found when Cluster API's MachineSet
	// controller writes it, after the Machine has moved to the new MachineSet:
	// the write fails on every retry and the Machine waits for ever, updated
	// neither in place nor by replacement. KubeadmControlPlane dry-runs its
	// own writes before asking CanUpdateMachine; the MachineSet path does
	// not, so this is done here.
	//
	// The answer: a refusal by the server (admission webhook, validating
	// admission policy, schema: Invalid, BadRequest, a Forbidden that is not
	// RBAC's) declines, naming the machine and the server's message, so that
	// Cluster API replaces the machines instead; RBAC's Forbidden is a Failure
	// matching ErrDryRunForbidden; a timeout, a 5xx, a 429 or no connection is
	// a Failure Cluster API asks again after. A machine gone meanwhile is
	// skipped.
	//
	// It needs list on Machines and patch on the infrastructure machines'
	// resource (the dry run is authorized as the write it tries). Up to
	// eight machines are tried at once.
	InfrastructureDryRun client.Client

	// EventRecorder (default nil: none), with ManagementReader, records a Warning Event
	// (observe.EventReasonCanUpdateFailed) when a CanUpdate* answer is a Failure (an
	// unknown ExtensionConfig setting, a malformed request, a check that
	// could not decide), on the object a user describes to see why the
	// rollout does not move: the MachineDeployment of a CanUpdateMachineSet
	// request's MachineSet, the KubeadmControlPlane of a CanUpdateMachine
	// request's Machine (the Machine itself, or the MachineSet, when nothing
	// owns them). Cluster API v1.14 only logs such a Failure and retries, so
	// without the Event the reason is in two controllers' logs only.
	//
	// ManagementReader reads the live Machine or MachineSet for its owner references
	// (get on Machines and MachineSets); the requests carry neither them nor
	// UIDs, and `kubectl describe` shows only Events that carry the object's
	// UID. A Failure repeated with the same message for the same request
	// object records nothing more until that object gets an answer that is
	// not a Failure (per process: each replica of the extension records it
	// once). NewExtension refuses a recorder without ManagementReader.
	EventRecorder events.EventRecorder

	// ManagementReader reads the live Machine or MachineSet for the owner
	// references of EventRecorder's Events. NewExtension refuses an
	// EventRecorder without it, and it without an EventRecorder.
	ManagementReader client.Reader
}

// NewExtension builds the hook handlers around a decider from opts (see
// ExtensionOptions for each field's default). Its errors match
// ErrInvalidOption and name the field.
func NewExtension(d strategy.Decider, opts ExtensionOptions) (*Extension, error) {
	if d == nil {
		return nil, &OptionError{Option: "NewExtension", Detail: "nil decider"}
	}
	e := &Extension{decider: d, failure: runtimehooksv1.FailurePolicyFail, diffOpts: opts.DiffOptions, log: opts.Logger,
		metrics: opts.Metrics, images: opts.Images, dryRun: opts.InfrastructureDryRun}
	if opts.FailurePolicy != "" {
		e.failure = opts.FailurePolicy
	}
	if opts.EventRecorder != nil || opts.ManagementReader != nil {
		if opts.EventRecorder == nil || opts.ManagementReader == nil {
			return nil, &OptionError{Option: "ExtensionOptions.EventRecorder", Detail: "needs ExtensionOptions.ManagementReader, and the reader a recorder"}
		}
		e.events = &canUpdateEvents{recorder: opts.EventRecorder, mgmt: opts.ManagementReader, last: map[string]string{}}
	}
	if e.failure != runtimehooksv1.FailurePolicyFail && e.failure != runtimehooksv1.FailurePolicyIgnore {
		return nil, &OptionError{Option: "ExtensionOptions.FailurePolicy", Detail: fmt.Sprintf("%q (want %s or %s)", e.failure, runtimehooksv1.FailurePolicyFail, runtimehooksv1.FailurePolicyIgnore)}
	}
	for i, c := range opts.Checks {
		if c == nil {
			return nil, &OptionError{Option: "ExtensionOptions.Checks", Detail: fmt.Sprintf("check %d is nil", i)}
		}
	}
	e.checks = []Check{VersionCheck(), KubeletArgsCheck(), FilesCheck()}
	if e.images != nil {
		if err := e.images.validate("ExtensionOptions.Images"); err != nil {
			return nil, err
		}
		e.checks = append(e.checks, imagesCheck(e.images))
	}
	e.checks = append(e.checks, opts.Checks...)
	differ, err := diff.New(append([]diff.Option{diff.InPlaceUpdate()}, e.diffOpts...)...)
	if err != nil {
		return nil, err
	}
	e.differ = differ
	if e.strict, err = strictDiffer(); err != nil {
		return nil, err
	}
	return e, nil
}

// Handlers returns the handlers to register on a
// sigs.k8s.io/cluster-api/exp/runtime/server.Server; names are prefixed
// with namePrefix ("<prefix>-can-update-machine", ...).
func (e *Extension) Handlers(namePrefix string) []server.ExtensionHandler {
	timeout := int32(HandlerTimeoutCanUpdate / time.Second)
	failure := runtimehooksv1.FailurePolicyFail
	if e != nil && e.failure != "" {
		failure = e.failure
	}
	return []server.ExtensionHandler{
		{Hook: runtimehooksv1.CanUpdateMachine, Name: namePrefix + "-can-update-machine", HandlerFunc: e.CanUpdateMachine,
			TimeoutSeconds: &timeout, FailurePolicy: new(failure)},
		{Hook: runtimehooksv1.CanUpdateMachineSet, Name: namePrefix + "-can-update-machineset", HandlerFunc: e.CanUpdateMachineSet,
			TimeoutSeconds: &timeout, FailurePolicy: new(failure)},
	}
}

// CanUpdateMachine answers the hook for one Machine (KubeadmControlPlane).
// A nil request, or an Extension not made by NewExtension, is a Failure;
// with a nil response there is nowhere to answer and nothing is done.
func (e *Extension) CanUpdateMachine(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest, resp *runtimehooksv1.CanUpdateMachineResponse) {
	if resp == nil {
		return
	}
	if err := e.usable(req == nil); err != nil {
		failResponse(err, resp)
		return
	}
	defer e.metrics.hookDone("CanUpdateMachine", time.Now())
	log := e.logger(ctx).WithValues("hook", "CanUpdateMachine", "machine", req.Desired.Machine.Namespace+"/"+req.Desired.Machine.Name,
		"cluster", req.Desired.Machine.Namespace+"/"+req.Desired.Machine.Spec.ClusterName)
	a, err := e.AnswerCanUpdateMachine(ctx, req)
	e.events.answered(ctx, log, canUpdateSubject{hook: "CanUpdateMachine", kind: "Machine", namespace: req.Desired.Machine.Namespace, name: req.Desired.Machine.Name}, err)
	if e.respond(log, "CanUpdateMachine", a, err, resp) {
		resp.MachinePatch, resp.BootstrapConfigPatch, resp.InfrastructureMachinePatch = a.MachinePatch, a.BootstrapPatch, a.InfrastructurePatch
	}
}

// AnswerCanUpdateMachine is CanUpdateMachine's answer as a value, without
// writing a response, recording metrics or logging. An error is what the
// hook answers as a Failure (a nil request, an incomplete one, a failed
// check); a decline is not an error.
func (e *Extension) AnswerCanUpdateMachine(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest) (Answer, error) {
	if err := e.usable(req == nil); err != nil {
		return Answer{}, err
	}
	cur := diff.State{Machine: &req.Current.Machine, Bootstrap: req.Current.BootstrapConfig, Infrastructure: req.Current.InfrastructureMachine}
	des := diff.State{Machine: &req.Desired.Machine, Bootstrap: req.Desired.BootstrapConfig, Infrastructure: req.Desired.InfrastructureMachine}
	if err := requireObjects("machine", req.Current.Machine.Name, req.Desired.Machine.Name,
		"infrastructureMachine", req.Current.InfrastructureMachine, req.Desired.InfrastructureMachine); err != nil {
		return Answer{}, err
	}
	if err := requireShapes(false, map[string]runtime.RawExtension{
		"current.bootstrapConfig": req.Current.BootstrapConfig, "desired.bootstrapConfig": req.Desired.BootstrapConfig,
		"current.infrastructureMachine": req.Current.InfrastructureMachine, "desired.infrastructureMachine": req.Desired.InfrastructureMachine,
	}); err != nil {
		return Answer{}, err
	}
	a, err := e.answer(ctx, req.GetSettings(), cur, des, req.Current.Machine.Spec.Version, req.Desired.Machine.Spec.Version, false)
	if err != nil {
		return Answer{}, err
	}
	return a.export(), nil
}

// CanUpdateMachineSet answers the hook for a MachineSet's templates
// (MachineDeployment rollouts).
// A nil request, or an Extension not made by NewExtension, is a Failure;
// with a nil response there is nowhere to answer and nothing is done.
func (e *Extension) CanUpdateMachineSet(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest, resp *runtimehooksv1.CanUpdateMachineSetResponse) {
	if resp == nil {
		return
	}
	if err := e.usable(req == nil); err != nil {
		failResponse(err, resp)
		return
	}
	defer e.metrics.hookDone("CanUpdateMachineSet", time.Now())
	log := e.logger(ctx).WithValues("hook", "CanUpdateMachineSet", "machineSet", req.Desired.MachineSet.Namespace+"/"+req.Desired.MachineSet.Name,
		"cluster", req.Desired.MachineSet.Namespace+"/"+req.Desired.MachineSet.Spec.ClusterName)
	a, err := e.AnswerCanUpdateMachineSet(ctx, req)
	// The current MachineSet: Cluster API may ask before it creates the
	// desired one.
	e.events.answered(ctx, log, canUpdateSubject{hook: "CanUpdateMachineSet", kind: "MachineSet", namespace: req.Current.MachineSet.Namespace, name: req.Current.MachineSet.Name}, err)
	if e.respond(log, "CanUpdateMachineSet", a, err, resp) {
		resp.MachineSetPatch, resp.BootstrapConfigTemplatePatch, resp.InfrastructureMachineTemplatePatch = a.MachinePatch, a.BootstrapPatch, a.InfrastructurePatch
	}
}

// AnswerCanUpdateMachineSet is CanUpdateMachineSet's answer as a value
// (see AnswerCanUpdateMachine).
func (e *Extension) AnswerCanUpdateMachineSet(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest) (Answer, error) {
	if err := e.usable(req == nil); err != nil {
		return Answer{}, err
	}
	cur := diff.State{Machine: &req.Current.MachineSet, Bootstrap: req.Current.BootstrapConfigTemplate, Infrastructure: req.Current.InfrastructureMachineTemplate}
	des := diff.State{Machine: &req.Desired.MachineSet, Bootstrap: req.Desired.BootstrapConfigTemplate, Infrastructure: req.Desired.InfrastructureMachineTemplate}
	if err := requireObjects("machineSet", req.Current.MachineSet.Name, req.Desired.MachineSet.Name,
		"infrastructureMachineTemplate", req.Current.InfrastructureMachineTemplate, req.Desired.InfrastructureMachineTemplate); err != nil {
		return Answer{}, err
	}
	if err := requireShapes(true, map[string]runtime.RawExtension{
		"current.bootstrapConfigTemplate": req.Current.BootstrapConfigTemplate, "desired.bootstrapConfigTemplate": req.Desired.BootstrapConfigTemplate,
		"current.infrastructureMachineTemplate": req.Current.InfrastructureMachineTemplate, "desired.infrastructureMachineTemplate": req.Desired.InfrastructureMachineTemplate,
	}); err != nil {
		return Answer{}, err
	}
	a, err := e.answer(ctx, req.GetSettings(), cur, des, req.Current.MachineSet.Spec.Template.Spec.Version, req.Desired.MachineSet.Spec.Template.Spec.Version, true)
	if err != nil {
		return Answer{}, err
	}
	return a.export(), nil
}

// ErrInvalidOption is matched by the errors of this package's constructors
// and of ExtensionConfig settings it cannot use: an option out of range, a
// nil dependency, an unknown setting. The message names the option.
var ErrInvalidOption = errors.New("invalid option")

// ErrIncompleteRequest is matched by the Failure answered to a CanUpdate*
// request that lacks an object Cluster API always sends (a nameless
// Machine or MachineSet, no infrastructure object): deciding on half a
// request could accept a change nobody looked at.
var ErrIncompleteRequest = errors.New("incomplete request")

// ErrMalformedRequest is matched by the Failure answered to a CanUpdate*
// request whose bootstrap or infrastructure object is not JSON, or whose
// spec (spec.template.spec for templates) is not an object: such input is
// refused, naming the field, not diffed (a string where the spec should be
// would otherwise read as a change no updater covers, and Cluster API
// would replace the machine over garbage).
var ErrMalformedRequest = errors.New("malformed request")

// requireShapes checks the raw objects' JSON and the shape of their spec.
func requireShapes(templates bool, fields map[string]runtime.RawExtension) error {
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	slices.Sort(names)
	for _, f := range names {
		raw := fields[f]
		if len(raw.Raw) == 0 {
			continue // absent, or a typed Object: nothing to check here
		}
		var obj map[string]any
		if err := json.Unmarshal(raw.Raw, &obj); err != nil {
			return fmt.Errorf("%w: %s is not a JSON object: %s", ErrMalformedRequest, f, errtext.Clip(err.Error()))
		}
		spec, ok := obj["spec"]
		path := f + ".spec"
		if ok && templates {
			if m, isMap := spec.(map[string]any); isMap {
				if tmpl, has := m["template"]; has {
					path += ".template"
					if tm, isMap := tmpl.(map[string]any); isMap {
						spec, ok = tm["spec"]
						path += ".spec"
					} else {
						spec = tmpl
					}
				}
			}
		}
		if !ok || spec == nil {
			continue
		}
		if _, isMap := spec.(map[string]any); !isMap {
			return fmt.Errorf("%w: %s is a %s, not an object", ErrMalformedRequest, path, jsonKind(spec))
		}
	}
	return nil
}

// jsonKind names a decoded JSON value's kind.
func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "list"
	}
	return fmt.Sprintf("%T", v)
}

// requireObjects checks that both sides name their machine (or machine
// set) and carry their infrastructure object.
func requireObjects(machineField, curName, desName, infraField string, curInfra, desInfra runtime.RawExtension) error {
	for _, c := range []struct {
		field string
		ok    bool
	}{
		{"current." + machineField + ".metadata.name", curName != ""},
		{"desired." + machineField + ".metadata.name", desName != ""},
		{"current." + infraField, len(curInfra.Raw) > 0 || curInfra.Object != nil},
		{"desired." + infraField, len(desInfra.Raw) > 0 || desInfra.Object != nil},
	} {
		if !c.ok {
			return fmt.Errorf("%w: %s is missing", ErrIncompleteRequest, c.field)
		}
	}
	return nil
}

// usable refuses a nil or unconstructed Extension and a nil request.
func (e *Extension) usable(nilRequest bool) error {
	if e == nil || e.decider == nil || e.differ == nil {
		return fmt.Errorf("%w: Extension not constructed with NewExtension", ErrInvalidOption)
	}
	if nilRequest {
		return fmt.Errorf("%w: no request", ErrIncompleteRequest)
	}
	return nil
}

// failResponse answers Failure with err's message, without metrics or
// logs (for an Extension that has neither).
func failResponse(err error, resp runtimehooksv1.ResponseObject) {
	resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
	resp.SetMessage(err.Error())
}

// fail answers Failure with err's message, counted and logged.
func (e *Extension) fail(log logr.Logger, hook string, err error, resp runtimehooksv1.ResponseObject) {
	e.metrics.decision(hook, observe.HookError)
	log.Error(err, "cannot answer")
	resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
	resp.SetMessage(err.Error())
}

// respond answers, sets status and message, counts the decision and
// logs it (declines at V(0) with the uncovered fields, accepts at V(1));
// ok says whether the patches are to be set.
// respond writes a into resp (or err as a Failure), with the metrics and
// logs, and reports whether the caller should set the patches.
func (e *Extension) respond(log logr.Logger, hook string, a Answer, err error, resp runtimehooksv1.ResponseObject) bool {
	if err != nil {
		e.fail(log, hook, err, resp)
		return false
	}
	resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
	resp.SetMessage(a.Message)
	if !a.Accept {
		e.metrics.decision(hook, observe.HookDecline)
		log.Info("declined: Cluster API will roll out the machine", "uncovered", a.Declined, "message", a.Message)
		return true
	}
	e.metrics.decision(hook, observe.HookAccept)
	log.V(1).Info("accepted", "message", a.Message)
	return true
}

// answer is a CanUpdate* answer before it is written to the response.
type answer struct {
	patches [3]runtimehooksv1.Patch
	msg     string
	decline bool
	// uncovered names the fields that made a decline ("field (Category)").
	uncovered []string
	decision  strategy.Decision
}

// Answer is a CanUpdateMachine or CanUpdateMachineSet answer as a value:
// the decision, why, and the patches that carry an accept. The hook
// handlers write it into the response; AnswerCanUpdateMachine and
// AnswerCanUpdateMachineSet give it to callers that want it typed (a
// preview, a test, another server).
type Answer struct {
	// Accept says that Cluster API may update the machine in place, after
	// applying the patches; false is a decline: Cluster API rolls it out.
	Accept bool
	// Message is the response's message: what is applied in place, or
	// why not.
	Message string
	// Decision is the strategy decision behind the answer: the updaters
	// and fields applied in place, or the uncovered fields. It is zero
	// when no decision was needed (no changes) or made (disabled by a
	// setting).
	Decision strategy.Decision
	// Declined names the fields that made a decline, as "path (Category)".
	Declined []string
	// MachinePatch, BootstrapPatch and InfrastructurePatch are the
	// patches of an accept for the Machine (or MachineSet), the bootstrap
	// config (template) and the infrastructure machine (template); a
	// patch is undefined when its object has nothing to patch.
	MachinePatch, BootstrapPatch, InfrastructurePatch runtimehooksv1.Patch
}

func (a answer) export() Answer {
	return Answer{Accept: !a.decline, Message: a.msg, Decision: a.decision, Declined: a.uncovered,
		MachinePatch: a.patches[diff.ObjectMachine], BootstrapPatch: a.patches[diff.ObjectBootstrap], InfrastructurePatch: a.patches[diff.ObjectInfrastructure]}
}

func (e *Extension) logger(ctx context.Context) logr.Logger {
	if e.log.GetSink() != nil {
		return e.log
	}
	return logr.FromContextOrDiscard(ctx)
}

// answer diffs, decides, checks feasibility and builds the patches
// (undefined patches when declining or when an object has nothing to
// patch). from and to are the current and desired Kubernetes versions.
//
// An accepted answer patches every change in the diff: the ones an
// updater applies and the ignored ones (SettingIgnore, a policy's
// ActionIgnore), so that Cluster API, which applies the patches and
// compares again, sees nothing left to roll. Ignoring a change means
// accepting it without doing anything on the node for it.
func (e *Extension) answer(ctx context.Context, settings map[string]string, cur, des diff.State, from, to string, templates bool) (answer, error) {
	var a answer
	set, err := e.settings(settings)
	if err != nil {
		return a, err
	}
	var cs diff.ChangeSet
	if templates {
		cs, err = e.differ.Templates(cur, des)
	} else {
		cs, err = e.differ.Machines(cur, des)
	}
	if err != nil {
		return a, err
	}
	// A change Cluster API makes only because of the version (the
	// ControlPlaneKubeletLocalMode gate it drops at v1.36) goes with it.
	cs = withVersionImplied(cs, from, to)
	if cs.Empty() {
		a.msg = "no changes"
		return e.checkPatched(a, cur, des, templates), nil
	}
	if set.disabled {
		a.msg, a.decline = "cannot update in place: disabled by the "+SettingDisabled+" setting", true
		a.uncovered = fieldNames(cs)
		return a, nil
	}
	ignored := cs.Filter(set.ignores)
	rest := cs.Filter(func(c diff.Change) bool { return !set.ignores(c) })
	d, err := e.decider.Decide(ctx, rest)
	if err != nil {
		return a, err
	}
	a.decision = d
	if d.Outcome == strategy.OutcomeReplace {
		a.msg, a.decline, a.uncovered = d.Message, true, fieldNames(d.Uncovered)
		return a, nil
	}
	if d.Outcome == strategy.OutcomeInPlace {
		req := CheckRequest{Current: cur, Desired: des, FromVersion: from, ToVersion: to, Templates: templates, Decision: d}
		for _, c := range e.checks {
			if err := c.Check(ctx, req); err != nil {
				if !errors.Is(err, ErrInfeasible) {
					return answer{}, fmt.Errorf("feasibility check: %w", err)
				}
				a.msg, a.decline, a.uncovered = "cannot update in place: "+err.Error(), true, fieldNames(d.InPlace)
				return a, nil
			}
		}
	}
	a.msg = d.Message
	if ig := ignored.Len() + d.Ignored.Len(); ig > 0 {
		note := fmt.Sprintf("%d ignored change(s) accepted without being applied: %s", ig, ignoredList(ignored, d.Ignored))
		if d.Outcome == strategy.OutcomeInPlace {
			a.msg += "; " + note
		} else {
			a.msg = note
		}
	}
	for _, o := range []diff.Object{diff.ObjectMachine, diff.ObjectBootstrap, diff.ObjectInfrastructure} {
		jp, err := cs.JSONPatch(o)
		if err != nil {
			return answer{}, err
		}
		if string(jp) != "[]" {
			a.patches[o] = runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: jp}
		}
	}
	a = e.checkPatched(a, cur, des, templates)
	if !a.decline && templates && e.dryRun != nil && a.patches[diff.ObjectInfrastructure].Patch != nil {
		why, err := e.dryRunInfrastructure(ctx, cur.Machine, des.Infrastructure)
		if err != nil {
			return answer{}, err
		}
		if why != "" {
			infra := cs.Filter(func(c diff.Change) bool { return c.Object == diff.ObjectInfrastructure })
			return answer{msg: why, decline: true, uncovered: fieldNames(infra), decision: a.decision}, nil
		}
	}
	return a, nil
}

// checkPatched is the last step of an answer that does not decline: it
// turns into a decline when Cluster API, after applying the patches, would
// still find differences (see selfCheckMessage).
func (e *Extension) checkPatched(a answer, cur, des diff.State, templates bool) answer {
	left, err := e.selfCheck(cur, des, a.patches, templates)
	if err == nil && len(left) == 0 {
		return a
	}
	msg := "cannot update in place: " + selfCheckMessage + ": "
	if err != nil {
		msg += err.Error()
	} else {
		const show = 10
		names := left
		if len(names) > show {
			names = append(names[:show:show], fmt.Sprintf("and %d more", len(left)-show))
		}
		msg += strings.Join(names, ", ")
	}
	return answer{msg: msg, decline: true, uncovered: left, decision: a.decision}
}

// ignoredList names the ignored fields (no values: they may be secrets).
func ignoredList(sets ...diff.ChangeSet) string {
	var names []string
	for _, cs := range sets {
		for _, c := range cs.Changes {
			names = append(names, c.Field)
		}
	}
	const show = 10
	if len(names) > show {
		return strings.Join(names[:show], ", ") + fmt.Sprintf(" and %d more", len(names)-show)
	}
	return strings.Join(names, ", ")
}

// fieldNames lists every change as "field (Category)", for logs (values
// stay out: they may be secrets).
func fieldNames(cs diff.ChangeSet) []string {
	out := make([]string, 0, cs.Len())
	for _, c := range cs.Changes {
		out = append(out, fmt.Sprintf("%s (%s)", c.Field, c.Category))
	}
	return out
}

// requestSettings are an ExtensionConfig's settings, parsed.
type requestSettings struct {
	disabled bool
	ignore   []diff.Pattern
}

// ignores reports whether a SettingIgnore pattern selects c.
func (r requestSettings) ignores(c diff.Change) bool {
	for _, p := range r.ignore {
		if p.Match(c) {
			return true
		}
	}
	return false
}

// settings parses the request's settings; unknown settings are an error
// so a typo in an ExtensionConfig is seen, not silently ignored.
func (e *Extension) settings(settings map[string]string) (requestSettings, error) {
	var r requestSettings
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := settings[k]
		switch k {
		case SettingDisabled:
			switch v {
			case "true":
				r.disabled = true
			case "false", "":
			default:
				return r, fmt.Errorf("%w: setting %s: %q is not true or false", ErrInvalidOption, k, v)
			}
		case SettingIgnore:
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p == "" {
					continue
				}
				pat, err := diff.ParsePattern(p)
				if err != nil {
					return r, fmt.Errorf("%w: setting %s: %w", ErrInvalidOption, SettingIgnore, err)
				}
				r.ignore = append(r.ignore, pat)
			}
		default:
			return r, fmt.Errorf("%w: unknown setting %q (known: %s, %s)", ErrInvalidOption, k, SettingDisabled, SettingIgnore)
		}
	}
	return r, nil
}
