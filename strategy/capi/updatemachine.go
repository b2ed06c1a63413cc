package capi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// MachineUpdater answers CAPI's UpdateMachine hook by upgrading the
// machine's node in place with a kubeadm plan (nodeexec/kubeadm) run by an
// upgrader pod (nodeexec/nodepod) on that node.
//
// By default it drains the node first (see WithoutDrain): once a pre-pull
// pod has proven that the upgrader image pulls and starts on the node
// (WithPrePullTimeout, WithoutPrePull; FailureImagePull otherwise, on an
// uncordoned node), it cordons the node as DefaultCordonOwner, evicts its pods through the Eviction API in a
// bounded attempt per call (WithDrainAttempt), answers RetryAfterSeconds
// with the PodDisruptionBudgets and pods in the way while the drain is
// unfinished, and Failure once it stays unfinished past WithDrainTimeout.
// The upgrader pod starts only once the node is drained, and the node is
// uncordoned (only if this updater cordoned it) once the kubelet reports
// the desired version, before the answer "done".
//
// It keeps no state in memory: the Node (found through spec.providerID,
// since CAPI strips status from the request) with its UpdateRecord
// (AnnotationInPlaceUpdate) and cordon record, and the upgrader pods on the
// node are the state. A restarted extension therefore continues where the
// last one was, drain deadline included. The record pins, when the update
// starts, the target version and the kubeadm role (chosen once from the
// control plane Nodes, whose versions change mid-update), and, before the
// pod is created, the upgrader pod: the plan
// and its pod stay the same for the whole update.
//
// There is never more than one upgrader pod of this updater running on a
// node: before creating one, UpdateMachine lists the upgrader pods
// (nodepod.Selector) on the node in the namespace it creates them in (the
// pod options' namespace) and waits while one of another plan (a changed
// desired version, say) is Pending or Running; finished pods of other
// plans there are deleted first. Labels alone are anyone's to set: a pod
// carrying them in another namespace is neither ours nor skipped by the
// drain. The workload client lists pods in all namespaces for the drain.
//
// Before anything disruptive (cordon, drain, the pod) it builds the plan
// and has the API server check the pod with a server-side dry run: a plan
// kubeadm refuses or a pod admission refuses is a Failure
// (FailurePlanRejected, FailurePodRejected) with the node left as it was.
// When it drains, the pre-pull comes next, still before the cordon: an
// upgrader image the node cannot pull is a Failure (FailureImagePull)
// with the node left as it was, not an upgrader pod in ImagePullBackOff
// on a drained node until the update deadline.
//
// A worker's version change to a minor above the control plane's does
// not start until every control plane Node runs the target minor, with no
// in-place update unfinished on it (ReasonPending, naming the node):
// ControlPlaneSkewCheck accepts such a change while the control plane is
// on its way to the version, since Cluster API's MachineDeployment does
// not order workers after the control plane.
//
// It answers RetryAfterSeconds > 0 while the update runs; 0 ("done") only
// once the node's kubelet reports the desired version AND no upgrader pod
// on the node is Pending or Running AND, for an update it started, the
// update's own pod was seen Succeeded and that is recorded on the Node
// (UpdateRecord.Succeeded). A reported version alone is no proof: the
// kubelet reports the new version before the plan's verify step has run,
// and a pod deleted before its success was seen is created again (it
// resumes from the journal on the host). Failure (starting with a Failure* reason; for a failed
// step, its name and exit code) on a terminal failure, including the
// update's own pod failing after the kubelet reports the version. A desired
// version set back to the node's version mid-update is done once the
// abandoned plan's pod has ended and has been deleted; if that pod had
// already upgraded the kubelet, going back is a downgrade and is refused
// (FailurePlanRejected).
//
// Progress is visible as the Node condition ConditionInPlaceUpdate, as
// Events on the Machine, and failures also on its MachineDeployment or
// KubeadmControlPlane (WithEventRecorder), in Prometheus metrics
// (WithUpdaterMetrics) and in logs with the keys machine, cluster, node,
// phase and step.
type MachineUpdater struct {
	workload     workload.Client
	clientset    workload.Clientset
	podOpts      []nodepod.Option
	planHook     func(*kubeadm.Config)
	retryAfter   int32
	log          logr.Logger
	drain        bool
	prePull      bool
	prePullTO    time.Duration
	drainTimeout time.Duration
	drainAttempt time.Duration
	drainOpts    []drain.Option
	cordonOwner  string
	recorder     events.EventRecorder
	metrics      *Metrics
	clock        clock.PassiveClock
	gate         strategy.Gate
	gates        []strategy.Gate // as given to WithGates, checked by NewMachineUpdater

	mu          sync.Mutex
	lastFailure map[string]string // machine -> failure reason, for requests with no node to keep it on
	// nodeNames caches cluster + providerID -> node name (verified on use).
	nodeNames map[string]string
	// missingSince is when each machine's node was first found missing.
	missingSince  map[string]time.Time
	goneChecked   map[string]bool
	nodeGoneGrace time.Duration
	// podNamespace is where the upgrader pods are created (from podOpts).
	podNamespace string
	// images picks the pod's image by target version (WithVersionImages).
	images          ImagesByVersion
	updateTimeout   time.Duration
	notReadyTimeout time.Duration
	mgmt            client.Reader
	// unreachableSince is when each machine's workload cluster was first
	// found unreachable in the current run of failed calls (this process).
	unreachableSince   map[string]time.Time
	unreachableTimeout time.Duration
}

// MachineUpdaterOption configures a MachineUpdater.
type MachineUpdaterOption func(*MachineUpdater)

// WithPodOptions passes options to the upgrader pod builder (image, mode,
// runner command, tolerations...). nodepod.WithImage is required.
func WithPodOptions(opts ...nodepod.Option) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.podOpts = append(u.podOpts, opts...) }
}

// WithVersionImages runs each update's upgrader pod with the image of its
// target version from images (the bundle that carries that version's
// binaries), over any nodepod.WithImage in WithPodOptions. A version
// without an image is a Failure (FailurePodBuild) found before the node is
// disrupted; pass the same map to the Extension (WithUpgraderImages) so
// that such a version is answered with a Failure before Cluster API
// commits to it.
// NewMachineUpdater fails on an invalid map.
func WithVersionImages(images ImagesByVersion) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.images = images }
}

// WithPlanConfig lets the caller adjust each kubeadm plan's configuration
// (staging paths, skipped components) before it is built.
func WithPlanConfig(f func(*kubeadm.Config)) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.planHook = f }
}

// WithRetryAfter sets the RetryAfterSeconds answered while an update runs
// (default 15).
func WithRetryAfter(seconds int32) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.retryAfter = seconds }
}

// WithUpdaterLogger sets the logger (default: the request context's).
// Transitions (started, drained, succeeded, failed) log at V(0), every
// in-progress answer at V(1).
func WithUpdaterLogger(l logr.Logger) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.log = l }
}

// WithEventRecorder records Kubernetes Events on the Machine, in the
// management cluster, with the EventReason* reasons. With
// WithManagementReader, a failure (EventReasonUpdateFailed, recorded once
// per failure like the Machine's) is also recorded on the Machine's
// owner, the object `kubectl describe` is run on when a rollout stops: its
// MachineDeployment (read through its MachineSet: get on MachineSets), or
// its KubeadmControlPlane, with the Machine as the related object.
// Cluster API v1.14 puts only a fixed text on the Machine's Updating
// condition. A controller-runtime manager hands a recorder out with
// mgr.GetEventRecorder(name); without a manager use
// k8s.io/client-go/tools/events.NewBroadcaster. The recorder's scheme
// needs no CAPI types: the Machine carries its kind, the owner is an
// object reference.
func WithEventRecorder(r events.EventRecorder) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.recorder = r }
}

// WithUpdaterMetrics records the UpdateMachine metrics (machines in
// progress, failures, time per machine) in m.
func WithUpdaterMetrics(m *Metrics) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.metrics = m }
}

// WithUpdaterClock sets the clock for update and drain start times and the drain
// deadline (default: the real clock; tests use a fake one).
func WithUpdaterClock(c clock.PassiveClock) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.clock = c }
}

// WithGates asks gates before an update starts, before anything is done to
// the node: Wait answers in progress (ReasonGateClosed, the gate's reason,
// RetryAfterSeconds the gate's RetryAfter, at most MaxGateRetryAfter, at
// least WithRetryAfter's), so Cluster API asks again and nothing changes
// until the gate opens; Stop answers Failure (FailureGateStopped). An
// update that has started is not interrupted by a gate that closes. Give a
// strategy.Gates to ask several.
func WithGates(gates ...strategy.Gate) MachineUpdaterOption {
	return func(u *MachineUpdater) {
		u.gates = append(u.gates, gates...)
		if len(u.gates) == 1 {
			u.gate = u.gates[0]
		} else {
			u.gate = strategy.Gates(u.gates)
		}
	}
}

// MaxGateRetryAfter caps the RetryAfterSeconds of a closed gate's answer,
// so that Cluster API asks again, and a gate changed meanwhile is seen,
// at least this often.
const MaxGateRetryAfter = time.Hour

// DefaultNodeGoneGrace is how long UpdateMachine waits for a machine's
// Node to (re)appear before it answers Failure (FailureNodeGone).
const DefaultNodeGoneGrace = 10 * time.Minute

// WithNodeGoneGrace sets how long a machine's Node may be missing (no Node
// with its spec.providerID) before UpdateMachine answers Failure
// (FailureNodeGone) instead of waiting (default DefaultNodeGoneGrace; 0
// waits for ever). The time counts from the first call that found no
// Node, recorded in NodeGoneConfigMap in the workload cluster so that a
// restarted extension keeps it (the Node, which holds every other piece of
// the update's state, is what is missing).
func WithNodeGoneGrace(d time.Duration) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.nodeGoneGrace = d }
}

// NewMachineUpdater builds the UpdateMachine handler. Draining is on by
// default, so it needs WithWorkloadClientset, or WithoutDrain.
func NewMachineUpdater(workload workload.Client, opts ...MachineUpdaterOption) (*MachineUpdater, error) {
	if workload == nil {
		return nil, fmt.Errorf("%w: nil workload client getter", ErrInvalidOption)
	}
	u := &MachineUpdater{
		workload: workload, retryAfter: 15,
		drain: true, prePull: true, prePullTO: DefaultPrePullTimeout, drainTimeout: DefaultDrainTimeout, drainAttempt: DefaultDrainAttempt, cordonOwner: DefaultCordonOwner,
		clock: clock.RealClock{}, lastFailure: map[string]string{},
		nodeNames: map[string]string{}, missingSince: map[string]time.Time{}, goneChecked: map[string]bool{}, nodeGoneGrace: DefaultNodeGoneGrace,
		updateTimeout: DefaultUpdateTimeout, notReadyTimeout: DefaultNotReadyTimeout,
		unreachableSince: map[string]time.Time{}, unreachableTimeout: DefaultWorkloadUnreachableTimeout,
	}
	for _, o := range opts {
		if o != nil {
			o(u)
		}
	}
	switch {
	case u.retryAfter <= 0:
		return nil, fmt.Errorf("%w: retry after %d seconds: must be positive", ErrInvalidOption, u.retryAfter)
	case u.drain && u.clientset == nil:
		return nil, fmt.Errorf("%w: draining (on by default) needs WithWorkloadClientset; pass WithoutDrain to update nodes without draining them", ErrInvalidOption)
	case u.drainAttempt <= 0:
		return nil, fmt.Errorf("%w: drain attempt %s: must be positive", ErrInvalidOption, u.drainAttempt)
	case u.drainTimeout < 0:
		return nil, fmt.Errorf("%w: drain timeout %s: must not be negative", ErrInvalidOption, u.drainTimeout)
	case u.prePullTO <= 0:
		return nil, fmt.Errorf("%w: pre-pull timeout %s: must be positive (WithoutPrePull turns the pre-pull off)", ErrInvalidOption, u.prePullTO)
	case u.cordonOwner == "":
		return nil, fmt.Errorf("%w: empty cordon owner", ErrInvalidOption)
	case u.clock == nil:
		return nil, fmt.Errorf("%w: nil clock", ErrInvalidOption)
	case u.updateTimeout < 0 || u.notReadyTimeout < 0:
		return nil, fmt.Errorf("%w: update timeout %s, not-ready timeout %s: must not be negative", ErrInvalidOption, u.updateTimeout, u.notReadyTimeout)
	case u.nodeGoneGrace < 0:
		return nil, fmt.Errorf("%w: node-gone grace %s: must not be negative", ErrInvalidOption, u.nodeGoneGrace)
	case u.unreachableTimeout < 0:
		return nil, fmt.Errorf("%w: workload-unreachable timeout %s: must not be negative", ErrInvalidOption, u.unreachableTimeout)
	}
	for i, g := range u.gates {
		if g == nil {
			return nil, fmt.Errorf("%w: WithGates: gate %d is nil", ErrInvalidOption, i)
		}
	}
	// The pod options are checked once here, on a one-step plan, so that a
	// pod that can never be built is refused at startup; the probe also
	// says which namespace the upgrader pods live in.
	probeOpts := u.podOpts
	if u.images != nil {
		if err := u.images.Validate(); err != nil {
			return nil, err
		}
		img, _ := u.images.Image(u.images.versions()[0])
		probeOpts = append(append([]nodepod.Option(nil), u.podOpts...), nodepod.WithImage(img))
	}
	probe, err := nodepod.Build(nodeexec.Plan{Name: "probe", Node: "probe", Steps: []nodeexec.Step{{Name: "probe", Argv: []string{"true"}}}}, probeOpts...)
	if err != nil {
		return nil, fmt.Errorf("%w: upgrader pod options (WithPodOptions): %w", ErrInvalidOption, err)
	}
	if u.drain && u.prePull {
		if _, err := nodepod.BuildPrePull("probe", probeOpts...); err != nil {
			return nil, fmt.Errorf("%w: pre-pull pod options (WithPodOptions): %w", ErrInvalidOption, err)
		}
	}
	u.podNamespace = probe.Namespace
	return u, nil
}

// Handler returns the handler to register on CAPI's runtime server.
func (u *MachineUpdater) Handler(namePrefix string) server.ExtensionHandler {
	timeout := int32(HandlerTimeoutUpdateMachine / time.Second)
	return server.ExtensionHandler{Hook: runtimehooksv1.UpdateMachine, Name: namePrefix + "-update-machine", HandlerFunc: u.UpdateMachine,
		TimeoutSeconds: &timeout, FailurePolicy: new(runtimehooksv1.FailurePolicyFail)}
}

// HandlerTimeoutUpdateMachine is the TimeoutSeconds the UpdateMachine
// handler announces in discovery: one call may read the workload
// cluster's pods and PodDisruptionBudgets to say why a drain is blocked,
// which takes longer than Cluster API's default of 10 seconds on a large
// node. Its FailurePolicy is Fail: an update Cluster API may not ignore.
const HandlerTimeoutUpdateMachine = 30 * time.Second

// UpdateMachine answers the hook. It is idempotent and driven by the desired
// Machine only.
func (u *MachineUpdater) UpdateMachine(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
	if resp == nil {
		return
	}
	if u == nil || u.workload == nil {
		failResponse(fmt.Errorf("%w: MachineUpdater not constructed with NewMachineUpdater", ErrInvalidOption), resp)
		return
	}
	if req == nil {
		failResponse(fmt.Errorf("%w: no request", ErrIncompleteRequest), resp)
		return
	}
	defer u.metrics.hookDone("UpdateMachine", time.Now())
	log := u.log
	if log.GetSink() == nil {
		log = logr.FromContextOrDiscard(ctx)
	}
	log = log.WithValues("hook", "UpdateMachine")
	m := &req.Desired.Machine
	if err := validateNames(m); err != nil {
		// Nothing is looked up, remembered, counted or recorded for a
		// request that names no possible Machine.
		log.V(1).Info("request refused", "reason", FailureInvalidMachine, "error", err.Error())
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage(fmt.Errorf("%w: %s: %w", ErrUpdateFailed, FailureInvalidMachine, err).Error())
		return
	}
	log = log.WithValues("machine", m.Namespace+"/"+m.Name, "cluster", m.Namespace+"/"+m.Spec.ClusterName)
	res := u.update(ctx, log, m, req.Desired)
	// From here on, m is the Machine acted on: the live one (with
	// WithManagementReader), nil when the request was refused before.
	m = res.machine
	if m == nil {
		if res.err != nil {
			resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
			resp.SetMessage(res.err.Error())
			return
		}
		resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
		resp.SetMessage(res.msg)
		resp.RetryAfterSeconds = u.retryAfter
		return
	}
	key := m.Namespace + "/" + m.Name
	log = log.WithValues("phase", res.phase)
	if res.node != "" {
		log = log.WithValues("node", res.node)
	}
	if res.step != "" {
		log = log.WithValues("step", res.step)
	}
	u.holdGates(ctx, log, m, res)
	switch {
	case res.err != nil:
		u.metrics.track(key, ReasonFailed)
		if res.newFailure {
			log.Error(res.err, "in-place update failed", "reason", res.failure)
		} else {
			log.V(1).Info("in-place update still failing", "reason", res.failure, "message", res.err.Error())
		}
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage(res.err.Error())
	case res.done:
		u.metrics.untrack(key)
		if res.finished {
			log.Info("in-place update done", "message", res.msg)
		} else {
			log.V(1).Info("nothing to update", "message", res.msg)
		}
		resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
		resp.SetMessage(res.msg)
		resp.RetryAfterSeconds = 0
	default:
		u.metrics.track(key, res.phase)
		log.V(1).Info("in-place update in progress", "message", res.msg)
		resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
		resp.SetMessage(res.msg)
		resp.RetryAfterSeconds = u.retryAfter
		if secs := int32(min(res.retryAfter, MaxGateRetryAfter).Round(time.Second) / time.Second); secs > resp.RetryAfterSeconds {
			resp.RetryAfterSeconds = secs
		}
	}
}

// gateRequest is what the gates are asked about m.
func gateRequest(m *clusterv1.Machine, node string, now time.Time) strategy.GateRequest {
	req := strategy.GateRequest{Cluster: m.Namespace + "/" + m.Spec.ClusterName, Role: strategy.RoleWorker, Group: m.Labels[clusterv1.MachineDeploymentNameLabel],
		Machine: m.Name, Node: node, Now: now}
	if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		req.Role, req.Group = strategy.RoleControlPlane, ""
	}
	return req
}

// PeekGates says what WithGates' gates would answer now about an update
// of m, each gate in order (the members of a strategy.Gates given to
// WithGates each on its own), taking nothing: strategy.Gates.PeekEach. m's
// node is its status.nodeRef, where UpdateMachine finds the Node by
// spec.providerID: until Cluster API sets the nodeRef, a gate that looks
// at the machine's own node (a soak) may answer otherwise than it will.
// It returns nil without gates; an updater not built by NewMachineUpdater
// answers nothing either.
func (u *MachineUpdater) PeekGates(ctx context.Context, m *clusterv1.Machine) []strategy.GateResult {
	if u == nil || m == nil || len(u.gates) == 0 {
		return nil
	}
	now := time.Now()
	if u.clock != nil {
		now = u.clock.Now()
	}
	return flatGates(u.gates).PeekEach(ctx, gateRequest(m, m.Status.NodeRef.Name, now))
}

// flatGates lists the gates of gs, nested strategy.Gates opened.
func flatGates(gs []strategy.Gate) strategy.Gates {
	var out strategy.Gates
	for _, g := range gs {
		if inner, ok := g.(strategy.Gates); ok {
			out = append(out, flatGates(inner)...)
			continue
		}
		out = append(out, g)
	}
	return out
}

// holdGates renews what the gates hold for an update in progress and
// releases it once the update is done (a failed update keeps it: see
// gates.Concurrency). Errors are logged: the slot's TTL bounds them.
func (u *MachineUpdater) holdGates(ctx context.Context, log logr.Logger, m *clusterv1.Machine, res updateResult) {
	h, ok := u.gate.(strategy.GateHolder)
	if !ok || m == nil {
		return
	}
	req := gateRequest(m, res.node, u.clock.Now())
	switch {
	case res.done:
		if err := h.Release(ctx, req); err != nil {
			log.Error(err, "releasing what the gates hold for the machine")
		}
	case res.err == nil && res.phase != ReasonGateClosed && res.phase != "":
		if err := h.Renew(ctx, req); err != nil {
			log.Error(err, "renewing what the gates hold for the machine")
		}
	}
}

// gatesOpen asks WithGates' gates whether the update of st's machine may
// start now.
func (u *MachineUpdater) gatesOpen(ctx context.Context, st *call) (updateResult, bool) {
	if u.gate == nil {
		return updateResult{}, true
	}
	r := u.gate.Check(ctx, gateRequest(st.machine, st.node.Name, st.now))
	switch r.Verdict {
	case strategy.Allow:
		return updateResult{}, true
	case strategy.Stop:
		st.log.Info("a gate stopped the update", "gate", r.Gate, "reason", r.Reason)
		return failedAs(FailureGateStopped, "node %s: %s", st.node.Name, r.String()), false
	}
	st.log.V(1).Info("a gate holds the update", "gate", r.Gate, "reason", r.Reason, "retryAfter", r.RetryAfter)
	res := waiting(ReasonGateClosed, "node %s not started: %s", st.node.Name, r.String())
	res.retryAfter = r.RetryAfter
	return res, false
}

// ErrUpdateFailed is matched by terminal update failures.
var ErrUpdateFailed = errors.New("in-place update failed")

type updateResult struct {
	// retryAfter, when set, replaces WithRetryAfter's in the answer.
	retryAfter time.Duration
	done       bool
	finished   bool   // done, and this call ended an update recorded on the node
	phase      string // a Reason* constant; "" when there is nothing to show
	msg        string
	err        error  // terminal; wraps ErrUpdateFailed
	failure    string // a Failure* constant, with err
	node       string
	step       string
	// newFailure: this answer starts a failure (not a repeat of the last).
	newFailure bool
	// machine is the Machine acted on (update): nil when nothing was.
	machine *clusterv1.Machine
}

func waiting(phase, format string, args ...any) updateResult {
	return updateResult{phase: phase, msg: fmt.Sprintf(format, args...)}
}

func failedAs(reason, format string, args ...any) updateResult {
	return updateResult{phase: ReasonFailed, failure: reason,
		err: fmt.Errorf("%w: %s: %s", ErrUpdateFailed, reason, fmt.Sprintf(format, args...))}
}

// call is what one UpdateMachine call knows once the node is found.
type call struct {
	machine *clusterv1.Machine
	cluster types.NamespacedName
	c       client.Client
	node    *corev1.Node
	prev    *corev1.NodeCondition // ConditionInPlaceUpdate as read
	now     time.Time
	log     logr.Logger
	// args are the desired kubelet extra arguments.
	args kubeletArgs
	// cp is the desired control plane configuration (control planes only).
	cp controlPlaneConfig
	// files are the desired KubeadmConfig files written in place.
	files desiredFileSet
	// externalEtcd: the cluster's etcd is external (etcdTopology), so the
	// first control plane takes no etcd snapshot.
	externalEtcd bool
	// rec is the node's UpdateRecord as this call last read or wrote it,
	// and recRaw its annotation value ("" for none).
	rec    *UpdateRecord
	recRaw string
}

func (st *call) nowMeta() metav1.Time { return metav1.NewTime(st.now) }

// writeRecord writes (nil: removes) the node's UpdateRecord and remembers it.
func (st *call) writeRecord(ctx context.Context, rec *UpdateRecord) error {
	raw, err := writeUpdateRecord(ctx, st.c, st.node.Name, rec)
	if err != nil {
		return err
	}
	st.rec, st.recRaw = rec, raw
	return nil
}

// update checks the request (WithManagementReader) and moves the update of
// the Machine it names one step. The result's machine is the Machine acted
// on: the live one, or nil when the request was refused or the management
// cluster could not be read; only then are Events recorded, failures
// remembered and metrics kept.
func (u *MachineUpdater) update(ctx context.Context, log logr.Logger, m *clusterv1.Machine, desired runtimehooksv1.UpdateMachineRequestObjects) updateResult {
	var spec *bootstrapv1.KubeadmConfigSpec
	if u.mgmt != nil {
		live, liveSpec, res, ok := u.checkRequest(ctx, log, m, desired)
		if !ok {
			return res
		}
		m, spec = live, liveSpec
	} else {
		var err error
		if spec, err = desiredSpec(desired.BootstrapConfig, false); err != nil {
			res := failedAs(FailureInvalidMachine, "desired %s", errtext.Clip(err.Error()))
			res.machine = m
			u.reportWithoutNode(ctx, log, m, &res)
			return res
		}
	}
	res := u.updateMachine(ctx, log, m, spec)
	res.machine = m
	return res
}

// updateMachine moves the update of m (the live Machine, with
// WithManagementReader) one step; spec is its KubeadmConfig's.
func (u *MachineUpdater) updateMachine(ctx context.Context, log logr.Logger, m *clusterv1.Machine, spec *bootstrapv1.KubeadmConfigSpec) updateResult {
	var res updateResult
	args := desiredKubeletArgs(spec)
	_, isCP := m.Labels[clusterv1.MachineControlPlaneLabel]
	cpc := desiredControlPlaneConfig(spec, isCP)
	files := desiredFiles(spec)
	switch {
	case m.Spec.ProviderID == "":
		res = failedAs(FailureInvalidMachine, "desired Machine has no spec.providerID: the node cannot be found")
	case m.Spec.Version == "":
		res = failedAs(FailureInvalidMachine, "desired Machine has no spec.version")
	case m.Spec.ClusterName == "":
		res = failedAs(FailureInvalidMachine, "desired Machine has no spec.clusterName")
	}
	var to *version.Version
	if res.err == nil {
		var err error
		if to, err = version.ParseSemantic(m.Spec.Version); err != nil {
			res = failedAs(FailureInvalidMachine, "spec.version %s: %s", errtext.Quote(m.Spec.Version), errtext.Clip(err.Error()))
		}
	}
	if res.err != nil {
		u.reportWithoutNode(ctx, log, m, &res)
		return res
	}
	cluster := types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}
	c, err := u.workload(ctx, cluster)
	if err != nil {
		return u.workloadUnreachable(ctx, log, m, "waiting for the workload cluster", err)
	}
	key := m.Namespace + "/" + m.Name
	node, err := u.findNode(ctx, c, cluster, m.Spec.ProviderID)
	if err != nil && !errors.Is(err, errNoNode) && !errors.Is(err, errAmbiguousNode) {
		return u.workloadUnreachable(ctx, log, m, "waiting for the node", err)
	}
	u.workloadReached(key)
	switch {
	case errors.Is(err, errAmbiguousNode):
		res = failedAs(FailureAmbiguousNode, "%v: the machine's node cannot be told apart", err)
		u.reportWithoutNode(ctx, log, m, &res)
		return res
	case errors.Is(err, errNoNode):
		missing := u.nodeMissingFor(ctx, c, key, u.clock.Now())
		if u.nodeGoneGrace > 0 && missing > u.nodeGoneGrace {
			res = failedAs(FailureNodeGone, "%v for %s (grace %s): the node is gone; the machine needs replacing", err, missing.Truncate(time.Second), u.nodeGoneGrace)
			u.reportWithoutNode(ctx, log, m, &res)
			return res
		}
		return waiting(ReasonPending, "waiting for the node: %v (for %s)", err, missing.Truncate(time.Second))
	}
	u.nodeFound(ctx, c, key)
	if rec, _ := readUpdateRecord(node); rec != nil && rec.Machine != "" && rec.Machine != key {
		// Not reported on the node: its condition and record are the
		// other machine's.
		res = failedAs(FailureNodeClaimed, "node %s is being updated for machine %s (annotation %s), and machine %s names the same node (spec.providerID %s): one node, one machine; if %s is gone, remove the annotation",
			node.Name, rec.Machine, AnnotationInPlaceUpdate, key, errtext.Quote(m.Spec.ProviderID), rec.Machine)
		res.node = node.Name
		u.reportWithoutNode(ctx, log, m, &res)
		return res
	}
	u.forgetFailure(m)
	st := &call{machine: m, cluster: cluster, c: c, node: node, prev: InPlaceUpdateCondition(node), now: u.clock.Now(), log: log.WithValues("node", node.Name), args: args, cp: cpc, files: files}
	res = u.updateNode(ctx, st, to)
	res = u.deadlines(st, res)
	res = u.retry(ctx, st, res)
	res.node = node.Name
	u.report(ctx, st, &res)
	return res
}

// WithManagementReader checks every UpdateMachine request against the
// management cluster before acting on it, through mgmt (a manager's cached
// client is fine), with Cluster API's own preconditions for calling the
// hook (v1.14's Machine controller):
//
//   - the Machine exists, carries Cluster API's update-in-progress
//     annotation (clusterv1.UpdateInProgressAnnotation) and has the
//     UpdateMachine hook pending (runtimev1.PendingHooksAnnotation), and
//     the request names the same cluster, providerID and version, and has
//     the Machine's control-plane and MachineDeployment labels;
//   - when the Machine's bootstrap config is a KubeadmConfig, the request
//     carries it (same name), the live one carries the update-in-progress
//     annotation, and its spec is the request's; a Machine bootstrapped by
//     another kind of config is refused (the updater runs kubeadm); a
//     Machine without a bootstrap config must come with none;
//   - the request carries the Machine's infrastructure machine (same
//     group, kind and name), and the live one carries the
//     update-in-progress annotation.
//
// The update then acts on the live objects only: the role (control plane
// or worker, from the live Machine's labels), the version, the retry
// annotation, what the gates are asked, the kubelet arguments and control
// plane configuration (the live KubeadmConfig's spec), and the Events,
// which attach to the live Machine (its UID), so that `kubectl describe
// machine` shows them.
//
// A request that does not match is a Failure (FailureRequestMismatch)
// whose message is the same whatever the mismatch, and names nothing of
// the live objects (whether a Machine exists, its providerID or version):
// the details go to the log. Nothing is done, recorded or remembered for
// it: no Event, no metric, no failure kept in memory. mgmt needs get on
// Machines, KubeadmConfigs and the infrastructure machines' kinds, get on
// MachineSets to record a failure on the MachineDeployment
// (WithEventRecorder), and,
// when draining, list on MachineDrainRules and get on Clusters (the drain
// follows Cluster API's drain rules for the Machine; the Cluster is read
// only when a rule has a clusterSelector).
//
// When mgmt can also write (a client.Client, as a manager's is), a
// control plane's update to a new version ends by removing
// KubeadmControlPlane's certificate expiry annotation from the Machine's
// KubeadmConfig, since kubeadm upgrade renewed the certificates it dates
// (see forgetCertificatesExpiry); that needs patch on KubeadmConfigs.
//
// Without this option the request's Machine is used as sent; that is for
// tests and for callers that check requests themselves: anyone who can
// reach the hook could then drive the update.
func WithManagementReader(mgmt client.Reader) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.mgmt = mgmt }
}

// requestMismatch is the message of every FailureRequestMismatch answer:
// one message for a missing Machine, an unmarked one and a mismatched one,
// so that the answer tells a caller nothing about the management cluster.
const requestMismatch = "the request does not match a Machine that Cluster API is updating in place; the extension's log says why"

// validateNames checks the names a request gives before anything is looked
// up with them: the Machine's namespace (a DNS-1123 label), name and
// cluster name (DNS-1123 subdomains). Its errors quote at most
// errtext.MaxQuoted bytes of a name.
func validateNames(m *clusterv1.Machine) error {
	for _, f := range []struct {
		field, value string
		label        bool
	}{
		{"metadata.namespace", m.Namespace, true},
		{"metadata.name", m.Name, false},
		{"spec.clusterName", m.Spec.ClusterName, false},
	} {
		if f.value == "" && f.field == "spec.clusterName" {
			continue // answered InvalidMachine once the Machine is known
		}
		kind, max, valid := "a DNS-1123 subdomain", validation.DNS1123SubdomainMaxLength, validation.IsDNS1123Subdomain
		if f.label {
			kind, max, valid = "a DNS-1123 label", validation.DNS1123LabelMaxLength, validation.IsDNS1123Label
		}
		// The length first: a megabyte is not run through a regexp.
		if len(f.value) > max || len(valid(f.value)) > 0 {
			return fmt.Errorf("desired Machine's %s (%d bytes) is not %s: %s", f.field, len(f.value), kind, quoteShort(f.value))
		}
	}
	return nil
}

// quoteShort quotes s with errtext.Quote and keeps at most 120 bytes of
// the quoted text, so that an answer quoting it stays short even when
// every byte of s needs an escape.
func quoteShort(s string) string {
	q := errtext.Quote(s)
	if len(q) > 120 {
		q = q[:120] + "..."
	}
	return q
}

// checkRequest checks the request against the live Machine, its
// KubeadmConfig and its infrastructure machine (WithManagementReader) and
// returns the live Machine and its KubeadmConfig's spec (nil without one)
// to act on. A mismatch is a Failure with the one message requestMismatch,
// its details logged; a failed read is answered in progress.
func (u *MachineUpdater) checkRequest(ctx context.Context, log logr.Logger, m *clusterv1.Machine, desired runtimehooksv1.UpdateMachineRequestObjects) (*clusterv1.Machine, *bootstrapv1.KubeadmConfigSpec, updateResult, bool) {
	mismatch := func(why string, kv ...any) (*clusterv1.Machine, *bootstrapv1.KubeadmConfigSpec, updateResult, bool) {
		log.Info("UpdateMachine request refused: it does not match the management cluster", append([]any{"why", why}, kv...)...)
		return nil, nil, failedAs(FailureRequestMismatch, "%s", requestMismatch), false
	}
	readFailed := func(what string, err error) (*clusterv1.Machine, *bootstrapv1.KubeadmConfigSpec, updateResult, bool) {
		log.Info("reading the management cluster to check an UpdateMachine request", "object", what, "error", err.Error())
		return nil, nil, waiting(ReasonPending, "reading the management cluster to check the request: %s", errtext.Clip(err.Error())), false
	}
	live := &clusterv1.Machine{}
	if err := u.mgmt.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return mismatch("no such Machine")
		}
		return readFailed("Machine", err)
	}
	if _, ok := live.Annotations[clusterv1.UpdateInProgressAnnotation]; !ok {
		return mismatch("the Machine has no " + clusterv1.UpdateInProgressAnnotation + " annotation: Cluster API has not asked for its in-place update")
	}
	if !hookPending(live.Annotations[runtimev1.PendingHooksAnnotation]) {
		return mismatch("the Machine's " + runtimev1.PendingHooksAnnotation + " annotation does not hold UpdateMachine: Cluster API has not asked for its in-place update")
	}
	for _, f := range []struct{ field, req, live string }{
		{"spec.clusterName", m.Spec.ClusterName, live.Spec.ClusterName},
		{"spec.providerID", m.Spec.ProviderID, live.Spec.ProviderID},
		{"spec.version", m.Spec.Version, live.Spec.Version},
	} {
		if f.req != f.live {
			return mismatch("the request's "+f.field+" is not the Machine's", "request", errtext.Quote(f.req), "live", f.live)
		}
	}
	// The labels the update reads (the role, the gates' group) must be the
	// ones Cluster API sent: Cluster API copies the live Machine's.
	_, reqCP := m.Labels[clusterv1.MachineControlPlaneLabel]
	_, liveCP := live.Labels[clusterv1.MachineControlPlaneLabel]
	if reqCP != liveCP {
		return mismatch("the request's "+clusterv1.MachineControlPlaneLabel+" label is not the Machine's", "request", reqCP, "live", liveCP)
	}
	if r, l := m.Labels[clusterv1.MachineDeploymentNameLabel], live.Labels[clusterv1.MachineDeploymentNameLabel]; r != l {
		return mismatch("the request's "+clusterv1.MachineDeploymentNameLabel+" label is not the Machine's", "request", errtext.Quote(r), "live", l)
	}
	spec, why, err := u.checkBootstrapConfig(ctx, live, desired.BootstrapConfig)
	switch {
	case err != nil:
		return readFailed("KubeadmConfig", err)
	case why != "":
		return mismatch(why)
	}
	if why, err := u.checkInfraMachine(ctx, live, desired.InfrastructureMachine); err != nil {
		return readFailed("infrastructure machine", err)
	} else if why != "" {
		return mismatch(why)
	}
	return live, spec, updateResult{}, true
}

// hookPending tells whether Cluster API's pending-hooks annotation value
// (a comma-separated list of hook names) holds UpdateMachine.
func hookPending(list string) bool {
	name := catalog.HookName(runtimehooksv1.UpdateMachine)
	for h := range strings.SplitSeq(list, ",") {
		if h == name {
			return true
		}
	}
	return false
}

// requestObject decodes one of the request's objects ("" kind when the
// request carries none).
func requestObject(raw runtime.RawExtension) (*unstructured.Unstructured, error) {
	b := raw.Raw
	if b == nil && raw.Object != nil {
		var err error
		if b, err = json.Marshal(raw.Object); err != nil {
			return nil, err
		}
	}
	obj := &unstructured.Unstructured{}
	if len(b) == 0 || string(b) == "null" {
		return obj, nil
	}
	if err := json.Unmarshal(b, &obj.Object); err != nil {
		return nil, err
	}
	return obj, nil
}

// checkBootstrapConfig compares the request's bootstrap config with the
// live Machine's: a KubeadmConfig must be sent (same name), be marked by
// Cluster API for the update and have the spec the request carries, so
// that what UpdateMachine applies from it (kubelet arguments, control
// plane configuration) is Cluster API's, not a caller's. It returns the
// live spec, or why the request does not match, or a read error.
func (u *MachineUpdater) checkBootstrapConfig(ctx context.Context, live *clusterv1.Machine, raw runtime.RawExtension) (*bootstrapv1.KubeadmConfigSpec, string, error) {
	req, err := requestObject(raw)
	if err != nil {
		return nil, "the request's bootstrap config does not decode: " + errtext.Clip(err.Error()), nil
	}
	ref := live.Spec.Bootstrap.ConfigRef
	switch {
	case !ref.IsDefined():
		if req.GetKind() != "" {
			return nil, "the request carries a bootstrap config, and the Machine has none", nil
		}
		return nil, "", nil
	case ref.Kind != "KubeadmConfig" || ref.APIGroup != bootstrapv1.GroupVersion.Group:
		return nil, fmt.Sprintf("the Machine's bootstrap config is a %s (%s), not a KubeadmConfig: the updater runs kubeadm", ref.Kind, ref.APIGroup), nil
	case req.GetKind() == "":
		return nil, "the request carries no bootstrap config, and the Machine's is KubeadmConfig " + ref.Name, nil
	case req.GroupVersionKind() != bootstrapv1.GroupVersion.WithKind("KubeadmConfig") || req.GetName() != ref.Name ||
		(req.GetNamespace() != "" && req.GetNamespace() != live.Namespace):
		return nil, fmt.Sprintf("the request's bootstrap config %s %s is not the Machine's KubeadmConfig %s",
			errtext.Quote(req.GetAPIVersion()+"/"+req.GetKind()), errtext.Quote(req.GetName()), ref.Name), nil
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	key := types.NamespacedName{Namespace: live.Namespace, Name: ref.Name}
	if err := u.mgmt.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "no KubeadmConfig " + key.String(), nil
		}
		return nil, "", err
	}
	if _, ok := obj.GetAnnotations()[clusterv1.UpdateInProgressAnnotation]; !ok {
		return nil, "KubeadmConfig " + key.String() + " has no " + clusterv1.UpdateInProgressAnnotation + " annotation: Cluster API has not asked for its in-place update", nil
	}
	var liveSpec, reqSpec bootstrapv1.KubeadmConfigSpec
	for _, x := range []struct {
		obj  *unstructured.Unstructured
		spec *bootstrapv1.KubeadmConfigSpec
		what string
	}{{obj, &liveSpec, "KubeadmConfig " + key.String()}, {req, &reqSpec, "the request's KubeadmConfig"}} {
		if raw, ok := x.obj.Object["spec"]; ok {
			b, err := json.Marshal(raw)
			if err == nil {
				err = json.Unmarshal(b, x.spec)
			}
			if err != nil {
				return nil, x.what + ": spec: " + errtext.Clip(err.Error()), nil
			}
		}
	}
	if !apiequality.Semantic.DeepEqual(reqSpec, liveSpec) {
		return nil, "the request's bootstrap config spec is not KubeadmConfig " + key.String() + "'s", nil
	}
	return &liveSpec, "", nil
}

// checkInfraMachine requires the request to carry the live Machine's
// infrastructure machine, and the live one to be marked by Cluster API for
// the update, as Cluster API requires before it calls the hook. The live
// object is read with the request's API version (its group and kind must
// be the Machine's reference's).
func (u *MachineUpdater) checkInfraMachine(ctx context.Context, live *clusterv1.Machine, raw runtime.RawExtension) (string, error) {
	req, err := requestObject(raw)
	if err != nil {
		return "the request's infrastructure machine does not decode: " + errtext.Clip(err.Error()), nil
	}
	ref := live.Spec.InfrastructureRef
	gvk := req.GroupVersionKind()
	switch {
	case !ref.IsDefined():
		return "the Machine has no infrastructure machine", nil
	case gvk.Group != ref.APIGroup || gvk.Kind != ref.Kind || gvk.Version == "" || req.GetName() != ref.Name ||
		(req.GetNamespace() != "" && req.GetNamespace() != live.Namespace):
		return fmt.Sprintf("the request's infrastructure machine %s %s is not the Machine's %s %s (%s)",
			errtext.Quote(req.GetAPIVersion()+"/"+req.GetKind()), errtext.Quote(req.GetName()), ref.Kind, ref.Name, ref.APIGroup), nil
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	key := types.NamespacedName{Namespace: live.Namespace, Name: ref.Name}
	if err := u.mgmt.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return fmt.Sprintf("no %s %s", ref.Kind, key), nil
		}
		return "", err
	}
	if _, ok := obj.GetAnnotations()[clusterv1.UpdateInProgressAnnotation]; !ok {
		return fmt.Sprintf("%s %s has no %s annotation: Cluster API has not asked for its in-place update", ref.Kind, key, clusterv1.UpdateInProgressAnnotation), nil
	}
	return "", nil
}

// Deadline defaults.
const (
	// DefaultUpdateTimeout bounds a whole update, from its start recorded
	// on the Node to done (WithUpdateTimeout).
	DefaultUpdateTimeout = 2 * time.Hour
	// DefaultNotReadyTimeout bounds how long the node may stay NotReady
	// while its update is under way (WithNotReadyTimeout).
	DefaultNotReadyTimeout = 15 * time.Minute
)

// WithUpdateTimeout sets how long an update may go on, counted from its
// start recorded on the Node, before an answer that would say "still
// working" says Failure (FailureUpdateTimeout) instead (default
// DefaultUpdateTimeout; 0: no deadline). Nothing is interrupted: if the
// update finishes later, the next call answers done.
func WithUpdateTimeout(d time.Duration) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.updateTimeout = d }
}

// DefaultWorkloadUnreachableTimeout bounds how long UpdateMachine waits for a
// workload cluster it cannot reach (WithWorkloadUnreachableTimeout).
const DefaultWorkloadUnreachableTimeout = 30 * time.Minute

// WithWorkloadUnreachableTimeout sets how long UpdateMachine may go on
// answering "in progress" while it cannot reach the machine's workload
// cluster: no client (its kubeconfig secret cannot be read, is missing or
// holds no kubeconfig) or no answer from its API server to the node
// lookup. Past it, it answers Failure (FailureWorkloadUnreachable) with
// the last error, which names the secret or the server (default
// DefaultWorkloadUnreachableTimeout; 0: no deadline).
//
// WithUpdateTimeout and WithNotReadyTimeout count from times recorded on
// the Node, which an unreachable cluster does not show; this deadline is
// counted from the management side instead: from the first call of this
// process that found the cluster unreachable since it last reached it,
// and never from before Cluster API started the update (the live
// Machine's Updating condition turning True, with WithManagementReader),
// so a failure left over from an earlier update does not count. A call
// that reaches the cluster resets it. A restarted extension counts
// afresh, so the Failure comes at most this long after the restart; it
// is not terminal either: Cluster API keeps calling, and the first call
// that reaches the cluster goes on with the update.
func WithWorkloadUnreachableTimeout(d time.Duration) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.unreachableTimeout = d }
}

// workloadUnreachable answers a call that could not reach m's workload
// cluster (err says why): in progress, or Failure once it has been so for
// longer than the unreachable timeout.
func (u *MachineUpdater) workloadUnreachable(ctx context.Context, log logr.Logger, m *clusterv1.Machine, what string, err error) updateResult {
	key := m.Namespace + "/" + m.Name
	now := u.clock.Now()
	u.mu.Lock()
	since, ok := u.unreachableSince[key]
	if !ok {
		since = now
		if len(u.unreachableSince) >= maxRememberedFailures {
			for k := range u.unreachableSince { // forget one: it counts afresh
				delete(u.unreachableSince, k)
				break
			}
		}
		u.unreachableSince[key] = now
	}
	u.mu.Unlock()
	if started, ok := updatingSince(m); ok && started.After(since) {
		since = started
	}
	waited := max(now.Sub(since), 0)
	if u.unreachableTimeout > 0 && waited > u.unreachableTimeout {
		res := failedAs(FailureWorkloadUnreachable, "%s for %s (deadline %s, counted in the management cluster): %s",
			what, waited.Truncate(time.Second), u.unreachableTimeout, errtext.Clip(err.Error()))
		u.reportWithoutNode(ctx, log, m, &res)
		return res
	}
	return waiting(ReasonPending, "%s: %v (for %s)", what, err, waited.Truncate(time.Second))
}

// workloadReached forgets that the machine's workload cluster was
// unreachable.
func (u *MachineUpdater) workloadReached(key string) {
	u.mu.Lock()
	delete(u.unreachableSince, key)
	u.mu.Unlock()
}

// updatingSince is when Cluster API's Updating condition on m (the live
// Machine; a request's Machine has no status) last turned True: when it
// started the in-place update.
func updatingSince(m *clusterv1.Machine) (time.Time, bool) {
	for _, c := range m.Status.Conditions {
		if c.Type == clusterv1.MachineUpdatingCondition && c.Status == metav1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// WithNotReadyTimeout sets how long the node's Ready condition may stay
// False or Unknown while its update is under way (the kubelet restart
// makes it NotReady for seconds) before an answer that would say "still
// working" says Failure (FailureNodeNotReady) instead (default
// DefaultNotReadyTimeout; 0: no deadline). A kubelet that does not come
// back starts no further step, so waiting longer would wait for ever.
func WithNotReadyTimeout(d time.Duration) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.notReadyTimeout = d }
}

// deadlines turns an in-progress answer for an update recorded on the
// node into a Failure once the update or the node's NotReady spell has
// lasted too long. Answers that are done or already failures pass.
func (u *MachineUpdater) deadlines(st *call, res updateResult) updateResult {
	if res.done || res.err != nil || st.rec == nil {
		return res
	}
	if u.notReadyTimeout > 0 {
		for _, c := range st.node.Status.Conditions {
			if c.Type != corev1.NodeReady || c.Status == corev1.ConditionTrue || c.LastTransitionTime.IsZero() {
				continue
			}
			if d := st.now.Sub(c.LastTransitionTime.Time); d > u.notReadyTimeout {
				out := failedAs(FailureNodeNotReady, "node %s has been NotReady (%s: %s) for %s during its update (deadline %s): its kubelet starts no further step; %s",
					st.node.Name, c.Reason, c.Message, d.Truncate(time.Second), u.notReadyTimeout, res.msg)
				out.step = res.step
				return out
			}
		}
	}
	if u.updateTimeout > 0 {
		if d := st.now.Sub(st.rec.Started.Time); d > u.updateTimeout {
			out := failedAs(FailureUpdateTimeout, "node %s: update to %s not done after %s (deadline %s): %s",
				st.node.Name, st.rec.Version, d.Truncate(time.Second), u.updateTimeout, res.msg)
			out.step = res.step
			return out
		}
	}
	return res
}

// updateNode moves the node's update one step. The node's UpdateRecord
// pins what the update is about once it starts: the target version, the
// kubeadm role, and (before it is created) the upgrader pod, so later calls
// keep building the same plan whatever kubeadm-config says by then. The
// upgrader pods on the node are listed on every call, and:
//
//   - no upgrader pod is created while another one (of another plan: an
//     earlier desired version, an earlier extension's options) is Pending
//     or Running on the node; the answer is RetryAfterSeconds, naming it;
//   - a finished upgrader pod of another plan is deleted (in the namespace
//     this updater creates pods in) before the update's own pod starts;
//   - the update's own pod failing is a Failure (FailureStepFailed).
//
// Once the kubelet reports the desired version, finish decides.
func (u *MachineUpdater) updateNode(ctx context.Context, st *call, to *version.Version) updateResult {
	m, node := st.machine, st.node
	current, want := node.Status.NodeInfo.KubeletVersion, m.Spec.Version
	rec, err := readUpdateRecord(node)
	if err != nil {
		st.log.Info("replacing an unreadable update record", "error", err.Error())
	}
	st.rec, st.recRaw = rec, node.Annotations[AnnotationInPlaceUpdate]

	pods, err := upgraderPodsOn(ctx, st.c, u.podNamespace, node.Name)
	if err != nil {
		return waiting(ReasonPending, "listing the upgrader pods on node %s: %v", node.Name, err)
	}
	// The kubelet's extra arguments are done when the node's annotation
	// says they were applied, or this update applied them with success.
	// A digest is applied when the Node keeps it, or this update applied
	// it with success.
	applied := func(annotation, digest, recorded string) bool {
		return digest == "" || node.Annotations[annotation] == digest ||
			(rec != nil && rec.Version == want && recorded == digest && rec.Succeeded != nil)
	}
	var recArgs, recCP, recFiles string
	if rec != nil {
		recArgs, recCP, recFiles = rec.KubeletArgs, rec.ControlPlaneConfig, rec.Files
	}
	if current == want && !u.unproven(rec, want, pods) &&
		applied(AnnotationKubeletArgs, st.args.digest, recArgs) && applied(AnnotationControlPlaneConfig, st.cp.digest, recCP) &&
		applied(AnnotationFiles, st.files.digest, recFiles) {
		return u.finish(ctx, st, rec, pods)
	}
	// Otherwise the kubelet may report the version, but an update of ours
	// to it has no recorded success and no pod to show one (the pod was
	// deleted by someone, or the record was written by an earlier version
	// of this updater): a reported version is not proof that the plan
	// verified the node, so the plan runs (again). Its pod resumes from the
	// journal on the host, re-running nothing that is done.
	switch {
	case rec == nil || rec.Version != want || rec.KubeletArgs != st.args.digest || rec.ControlPlaneConfig != st.cp.digest || rec.Files != st.files.digest:
		if res, ok := controlPlaneAhead(ctx, st, current, to); !ok {
			return res
		}
		if res, ok := u.gatesOpen(ctx, st); !ok {
			return res
		}
		role, res, ok := u.role(ctx, st, to)
		if !ok {
			return res
		}
		// A retry token already on the Machine when the update starts is
		// no request to retry this update.
		rec = &UpdateRecord{Machine: m.Namespace + "/" + m.Name, Version: want, Started: st.nowMeta(), Role: string(role),
			RetryToken: m.Annotations[AnnotationRetry], KubeletArgs: st.args.digest, ControlPlaneConfig: st.cp.digest, Files: st.files.digest}
		if u.drain && !u.prePull {
			// With the pre-pull, the drain starts (drainNode records it)
			// once the image is proven.
			rec.DrainStarted = &rec.Started
		}
		if err := st.writeRecord(ctx, rec); err != nil {
			return waiting(ReasonPending, "recording the update's start on node %s: %v", node.Name, err)
		}
		st.log.Info("in-place update started", "from", current, "to", want, "role", string(role), "drain", u.drain)
		u.event(m, eventNormal, EventReasonUpdateStarted, "Update", "In-place update of node %s from %s to %s started", node.Name, current, want)
	case rec.Role == "":
		// A record without a role (written by an earlier version of this
		// updater): choose the role now and keep it from here on.
		role, res, ok := u.role(ctx, st, to)
		if !ok {
			return res
		}
		next := *rec
		next.Role = string(role)
		if err := st.writeRecord(ctx, &next); err != nil {
			return waiting(ReasonPending, "recording the update's role on node %s: %v", node.Name, err)
		}
		rec = &next
	}
	if rec.Drained == nil && findPod(pods, rec.Pod) == nil {
		// Nothing disruptive has happened yet, or only a drain that has
		// not finished: check that the plan can be built and that the API
		// server accepts its pod before the node is (further) disrupted.
		if rec.ControlPlaneConfig != "" {
			// kubeadm renders the manifests from kubeadm-config, which
			// KubeadmControlPlane updates before it updates machines.
			why, err := kubeadmConfigMatches(ctx, st.c, st.cp)
			if err != nil {
				return waiting(ReasonPending, "checking kubeadm-config before updating control plane node %s: %v", node.Name, err)
			}
			if why != "" {
				return waiting(ReasonPending, "kube-system/kubeadm-config does not carry the desired control plane configuration yet (%s); KubeadmControlPlane writes it before it updates machines", why)
			}
		}
		if res, ok := u.validate(ctx, st, rec); !ok {
			return res
		}
	}
	if u.drain && u.prePull && rec.DrainStarted == nil {
		// Before the cordon: prove that the upgrader image runs on the
		// node. A record whose drain started (by an earlier version of
		// this updater, or WithoutPrePull) goes on without it.
		if res, ok := u.prePullImage(ctx, st, rec); !ok {
			res.step = "pre-pull"
			return res
		}
	}
	if u.drain && rec.Drained == nil {
		if res, ok := u.drainNode(ctx, st, rec); !ok {
			res.step = "drain"
			return res
		}
	}
	return u.runPlan(ctx, st, rec, pods)
}

// planName names the plan of one attempt of one update: a new update (a
// new record, started at another time) or a retry never meets the journal
// an earlier one left on the host, whose steps may have ended Failed,
// RolledBack or Succeeded for other binaries; calls within one attempt
// name the same plan, so a recreated pod resumes from its journal.
// WithPlanConfig may set another name (then retries share a journal).
func planName(node string, rec *UpdateRecord) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d\x00%s\x00%s\x00%s", node, rec.Version, rec.Role, rec.Started.Unix(), rec.Attempt, rec.KubeletArgs, rec.ControlPlaneConfig, rec.Files)))
	return "kubeadm-" + hex.EncodeToString(sum[:])[:12]
}

// buildPod builds the update's kubeadm plan and its upgrader pod from the
// kubelet version from. Its errors cannot heal by waiting: they are
// Failures (FailurePlanRejected, FailurePodBuild).
func (u *MachineUpdater) buildPod(st *call, rec *UpdateRecord, from string) (*corev1.Pod, updateResult, bool) {
	node := st.node.Name
	cfg := kubeadm.Config{Node: node, Role: kubeadm.Role(rec.Role), FromVersion: from, ToVersion: rec.Version, PlanName: planName(node, rec),
		// External etcd has no member on this node to snapshot: backing
		// it up is its operator's job (WithPlanConfig may say otherwise).
		SkipEtcdSnapshot: st.cp.externalEtcd || st.externalEtcd}
	if u.planHook != nil {
		u.planHook(&cfg)
	}
	var plan nodeexec.Plan
	var err error
	argsOnly := false
	switch {
	case rec.ControlPlaneConfig != "" && from == rec.Version:
		// Same version on a control plane: the static pod manifests
		// (then, below, the kubelet's extra arguments).
		if plan, err = controlPlaneConfigPlan(node, cfg.PlanName, st.cp); err != nil {
			return nil, failedAs(FailurePlanRejected, "node %s: control plane configuration: %v", node, err), false
		}
	case rec.KubeletArgs != "" && from == rec.Version:
		argsOnly = true
		// Same version: only the kubelet's extra arguments.
		plan, err = kubeadm.NewKubeletArgsPlan(kubeletArgsConfig(node, cfg.PlanName, "", st.args.args))
		if err != nil {
			return nil, failedAs(FailurePlanRejected, "node %s: kubelet extra arguments: %v", node, err), false
		}
	default:
		if plan, err = kubeadm.NewPlan(cfg); err != nil {
			return nil, failedAs(FailurePlanRejected, "node %s from %s to %s: %v", node, from, rec.Version, err), false
		}
		if rec.ControlPlaneConfig != "" {
			// `kubeadm upgrade` rendered the manifests; check them.
			if plan, err = withControlPlaneVerify(plan, st.cp); err != nil {
				return nil, failedAs(FailurePlanRejected, "node %s: control plane configuration: %v", node, err), false
			}
		}
	}
	if rec.KubeletArgs != "" && !argsOnly {
		if plan, err = withKubeletArgs(plan, st.args.args); err != nil {
			return nil, failedAs(FailurePlanRejected, "node %s: kubelet extra arguments: %v", node, err), false
		}
	}
	if rec.Files != "" {
		if plan, err = withFiles(plan, st.files, st.node.Annotations[AnnotationFiles]); err != nil {
			return nil, failedAs(FailurePlanRejected, "node %s: files: %v", node, err), false
		}
	}
	opts := u.podOpts
	if u.images != nil {
		img, ok := u.images.Image(rec.Version)
		if !ok {
			return nil, failedAs(FailurePodBuild, "no upgrader image for %s (have: %s); the extension's CanUpdate* should have refused it (capi.WithUpgraderImages with the same map)",
				rec.Version, strings.Join(u.images.versions(), ", ")), false
		}
		opts = append(append([]nodepod.Option(nil), u.podOpts...), nodepod.WithImage(img))
	}
	pod, err := nodepod.Build(plan, opts...)
	if err != nil {
		return nil, failedAs(FailurePodBuild, "building the upgrader pod: %v", err), false
	}
	return pod, updateResult{}, true
}

// validate builds the plan and the pod and has the API server check the
// pod with a server-side dry run, so that an update that cannot run is
// refused before the node is cordoned and drained, not after: a plan
// kubeadm refuses, or a pod that admission refuses (Pod Security, a
// policy webhook, an invalid field), is a Failure and the node is left as
// it is. A dry run that fails for a reason that may pass (the namespace
// does not exist yet, the API server is unreachable) is answered Pending,
// still before any disruption.
func (u *MachineUpdater) validate(ctx context.Context, st *call, rec *UpdateRecord) (updateResult, bool) {
	if res, ok := etcdTopology(ctx, st, rec); !ok {
		return res, false
	}
	pod, res, ok := u.buildPod(st, rec, st.node.Status.NodeInfo.KubeletVersion)
	if !ok {
		return res, false
	}
	err := st.c.Create(ctx, pod.DeepCopy(), client.DryRunAll)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return updateResult{}, true
	case podRefused(err):
		return failedAs(FailurePodRejected, "the API server refuses the upgrader pod %s/%s for node %s (dry run, before any disruption): %v",
			pod.Namespace, pod.Name, st.node.Name, err), false
	}
	return waiting(ReasonPending, "checking the upgrader pod %s/%s with a dry run before disrupting node %s: %v", pod.Namespace, pod.Name, st.node.Name, err), false
}

// podRefused tells an API refusal that waiting will not heal (admission,
// validation) from a transient error.
func podRefused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// unproven reports whether rec is an update of ours to want that has no
// recorded success and whose own pod is not on the node: "done" needs a
// success of the update's own pod, seen and recorded.
func (u *MachineUpdater) unproven(rec *UpdateRecord, want string, pods []corev1.Pod) bool {
	if rec == nil || rec.Version != want || rec.Succeeded != nil {
		return false
	}
	return rec.Pod == "" || findPod(pods, rec.Pod) == nil
}

// recordSuccess writes, once, that the update's own pod succeeded: the
// proof finish needs, which stays on the Node if the pod goes away.
func (u *MachineUpdater) recordSuccess(ctx context.Context, st *call, rec *UpdateRecord) (*UpdateRecord, error) {
	if rec.Succeeded != nil {
		return rec, nil
	}
	next := *rec
	now := st.nowMeta()
	next.Succeeded = &now
	if err := st.writeRecord(ctx, &next); err != nil {
		return rec, err
	}
	return &next, nil
}

// etcdTopology reads, for the first control plane of an update, whether
// the cluster's etcd is external, from kube-system/kubeadm-config's
// ClusterConfiguration in the workload cluster: what kubeadm itself reads.
// The Machine's KubeadmConfig is not enough: KubeadmControlPlane gives a
// joined control plane's KubeadmConfig no ClusterConfiguration. A missing
// ConfigMap means stacked etcd; a failed read is answered Pending, so the
// plan is never built two different ways.
func etcdTopology(ctx context.Context, st *call, rec *UpdateRecord) (updateResult, bool) {
	if rec.Role != string(kubeadm.RoleFirstControlPlane) || st.cp.externalEtcd {
		return updateResult{}, true
	}
	var cm corev1.ConfigMap
	err := st.c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"}, &cm)
	if apierrors.IsNotFound(err) {
		return updateResult{}, true
	}
	if err != nil {
		return waiting(ReasonPending, "reading kube-system/kubeadm-config for the etcd topology: %v", err), false
	}
	var cc struct {
		Etcd struct {
			External *struct {
				Endpoints []string `json:"endpoints"`
			} `json:"external"`
		} `json:"etcd"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
		return failedAs(FailurePlanRejected, "kube-system/kubeadm-config: ClusterConfiguration: %v", err), false
	}
	st.externalEtcd = cc.Etcd.External != nil && len(cc.Etcd.External.Endpoints) > 0
	return updateResult{}, true
}

// LabelControlPlaneNode is the label kubeadm puts on control plane Nodes;
// MachineUpdater reads the control plane's state from the Nodes carrying it.
const LabelControlPlaneNode = "node-role.kubernetes.io/control-plane"

// role is the kubeadm role of the machine's node for an update to version
// to. Only called when an update starts: the answer changes during the
// update, so the record pins it.
//
// A control plane node runs `kubeadm upgrade apply` (first control plane:
// etcd snapshot first) unless the upgrade to this version already ran or
// runs on another control plane node: another control plane Node whose
// kubelet reports to or later, or whose UpdateRecord goes to to with the
// first-control-plane role. kube-system/kubeadm-config is not evidence:
// KubeadmControlPlane writes the new version there before it updates any
// machine in place, so reading it would make every node "other control
// plane" and the apply, and the snapshot, would never run.
func (u *MachineUpdater) role(ctx context.Context, st *call, to *version.Version) (kubeadm.Role, updateResult, bool) {
	if _, cp := st.machine.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
		return kubeadm.RoleWorker, updateResult{}, true
	}
	var nodes corev1.NodeList
	if err := st.c.List(ctx, &nodes, client.HasLabels{LabelControlPlaneNode}); err != nil {
		return "", waiting(ReasonPending, "listing the control plane nodes to choose the kubeadm role: %v", err), false
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Name == st.node.Name {
			continue
		}
		if v, err := version.ParseSemantic(n.Status.NodeInfo.KubeletVersion); err == nil && !v.LessThan(to) {
			st.log.V(1).Info("upgrade node: another control plane node is at the version already", "other", n.Name)
			return kubeadm.RoleControlPlane, updateResult{}, true
		}
		if rec, _ := readUpdateRecord(n); rec != nil && rec.Role == string(kubeadm.RoleFirstControlPlane) && rec.Version == st.machine.Spec.Version {
			st.log.V(1).Info("upgrade node: another control plane node runs the upgrade apply", "other", n.Name)
			return kubeadm.RoleControlPlane, updateResult{}, true
		}
	}
	return kubeadm.RoleFirstControlPlane, updateResult{}, true
}

// controlPlaneAhead holds the start of a worker's version change until
// every control plane Node of the workload cluster (LabelControlPlaneNode)
// runs a kubelet at the target minor or above, with no in-place update of
// ours unfinished on it: the skew policy allows no kubelet newer than the
// API server, and ControlPlaneSkewCheck accepts a worker's change while
// the control plane is still on its way to the version (Cluster API's
// MachineDeployment does not wait for it). The answer is in progress
// (ReasonPending, naming the control plane node), with nothing done to the
// node. Control plane machines, a change within the node's minor and a
// cluster without control plane Nodes (a managed control plane) are not
// held.
func controlPlaneAhead(ctx context.Context, st *call, current string, to *version.Version) (updateResult, bool) {
	if _, cp := st.machine.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		return updateResult{}, true
	}
	if from, err := version.ParseSemantic(current); err == nil && !minorAbove(to, from) {
		return updateResult{}, true
	}
	var nodes corev1.NodeList
	if err := st.c.List(ctx, &nodes, client.HasLabels{LabelControlPlaneNode}); err != nil {
		return waiting(ReasonPending, "node %s not started: listing the control plane nodes to check their version first: %v", st.node.Name, err), false
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		kv := n.Status.NodeInfo.KubeletVersion
		v, err := version.ParseSemantic(kv)
		switch {
		case err != nil || minorAbove(to, v):
			st.log.V(1).Info("waiting for the control plane", "controlPlaneNode", n.Name, "kubeletVersion", kv)
			return waiting(ReasonPending, "node %s not started: waiting for the control plane to run %s first: control plane node %s runs %s (a kubelet may not be newer than its API server)",
				st.node.Name, st.machine.Spec.Version, n.Name, errtext.Quote(kv)), false
		case updateUnfinished(n):
			return waiting(ReasonPending, "node %s not started: waiting for the control plane to run %s first: the in-place update of control plane node %s is unfinished",
				st.node.Name, st.machine.Spec.Version, n.Name), false
		}
	}
	return updateResult{}, true
}

// updateUnfinished tells whether n's ConditionInPlaceUpdate says an
// update of ours is under way on it.
func updateUnfinished(n *corev1.Node) bool {
	c := InPlaceUpdateCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue && c.Reason != ReasonGateClosed && c.Reason != ReasonPending
}

// runPlan builds the update's plan and pod, waits for or clears the other
// upgrader pods on the node, creates the pod and reads its status.
func (u *MachineUpdater) runPlan(ctx context.Context, st *call, rec *UpdateRecord, pods []corev1.Pod) updateResult {
	c, node := st.c, st.node.Name
	current, want, role := st.node.Status.NodeInfo.KubeletVersion, rec.Version, kubeadm.Role(rec.Role)
	from := current
	if rec.Pod != "" && rec.FromVersion != "" {
		// The plan the update's pod runs, or ran before it went away:
		// rebuilt the same, its pod resumes from the host's journal.
		from = rec.FromVersion
	}
	if res, ok := etcdTopology(ctx, st, rec); !ok {
		return res
	}
	pod, res, ok := u.buildPod(st, rec, from)
	if !ok {
		return res
	}
	key := pod.Namespace + "/" + pod.Name
	if res, ok := u.clearOtherPods(ctx, st, pods, key, pod.Namespace); !ok {
		return res
	}
	if rec.Pod != key || rec.FromVersion != from {
		// Recorded before the pod exists, so that every later call knows
		// which upgrader pod on the node is this update's.
		next := *rec
		next.Pod, next.FromVersion = key, from
		if err := st.writeRecord(ctx, &next); err != nil {
			return waiting(ReasonPending, "recording the upgrader pod on node %s: %v", node, err)
		}
	}
	got, created, err := nodepod.CreateOrGet(ctx, c, pod)
	switch {
	case errors.Is(err, nodepod.ErrPlanChanged):
		if !podEnded(got) {
			return waiting(ReasonPending, "an upgrader pod for an earlier plan is still running on %s", node)
		}
		if err := c.Delete(ctx, got); err != nil && !apierrors.IsNotFound(err) {
			return waiting(ReasonPending, "replacing the finished upgrader pod of an earlier plan: %v", err)
		}
		return waiting(ReasonPending, "replaced the finished upgrader pod of an earlier plan on %s", node)
	case err != nil && podRefused(err):
		// Accepted by the dry run before the drain, refused now (a policy
		// changed meanwhile): waiting will not heal it.
		return failedAs(FailurePodRejected, "the API server refuses the upgrader pod %s for node %s: %v", key, node, err)
	case err != nil:
		return waiting(ReasonPending, "upgrader pod: %v", err)
	case created:
		st.log.Info("upgrader pod created", "pod", key, "role", string(role))
		return waiting(ReasonUpgrading, "started %s upgrade of node %s from %s to %s (pod %s)", role, node, from, want, key)
	}
	if why := podDiffers(pod, got); why != "" {
		return failedAs(FailureForeignPod, "pod %s on node %s is not the update's upgrader pod (%s); delete it to go on", key, node, why)
	}
	ps := nodepod.ReadStatus(got)
	switch ps.Phase {
	case nodepod.PhaseFailed:
		return stepFailed(node, got, ps)
	case nodepod.PhaseSucceeded:
		if _, err := u.recordSuccess(ctx, st, rec); err != nil {
			return waiting(ReasonWaitingForKubelet, "upgrade steps done on %s; recording their success: %v", node, err)
		}
		return waiting(ReasonWaitingForKubelet, "upgrade steps done on %s; waiting for the kubelet to report %s (reports %s)", node, want, current)
	}
	return upgrading(waiting(ReasonUpgrading, "upgrading node %s: %.0f%% of %d steps done", node, ps.Progress*100, len(ps.Steps)), ps)
}

// ownPod checks that p, the pod on the node with the name of the update's
// upgrader pod, is the pod the update would build (podDiffers) before its
// status is trusted.
func (u *MachineUpdater) ownPod(ctx context.Context, st *call, rec *UpdateRecord, p *corev1.Pod) (updateResult, bool) {
	from := st.node.Status.NodeInfo.KubeletVersion
	if rec.FromVersion != "" {
		from = rec.FromVersion
	}
	if res, ok := etcdTopology(ctx, st, rec); !ok {
		return res, false
	}
	want, res, ok := u.buildPod(st, rec, from)
	if !ok {
		return res, false
	}
	if why := podDiffers(want, p); why != "" {
		return failedAs(FailureForeignPod, "pod %s/%s on node %s is not the update's upgrader pod (%s); delete it to go on", p.Namespace, p.Name, st.node.Name, why), false
	}
	return updateResult{}, true
}

// podDiffers compares an existing pod with the upgrader pod the update
// builds (want) on what makes it the updater's: its node, host PID
// namespace, security contexts, and each container's name, image, command
// and arguments. A plan fingerprint annotation is anyone's to copy. It
// returns the first difference, or "".
func podDiffers(want, got *corev1.Pod) string {
	podSC := func(sc *corev1.PodSecurityContext) *corev1.PodSecurityContext {
		if sc == nil {
			return &corev1.PodSecurityContext{} // the API server's default
		}
		return sc
	}
	switch {
	case want.Spec.NodeName != got.Spec.NodeName:
		return "another node"
	case want.Spec.HostPID != got.Spec.HostPID:
		return "another spec.hostPID"
	case !apiequality.Semantic.DeepEqual(podSC(want.Spec.SecurityContext), podSC(got.Spec.SecurityContext)):
		return "another spec.securityContext"
	}
	for _, cs := range []struct {
		field     string
		want, got []corev1.Container
	}{{"spec.initContainers", want.Spec.InitContainers, got.Spec.InitContainers}, {"spec.containers", want.Spec.Containers, got.Spec.Containers}} {
		if len(cs.want) != len(cs.got) {
			return fmt.Sprintf("%d %s, not %d", len(cs.got), cs.field, len(cs.want))
		}
		for i := range cs.want {
			w, g := &cs.want[i], &cs.got[i]
			switch {
			case w.Name != g.Name:
				return fmt.Sprintf("%s[%d] is named %s, not %s", cs.field, i, errtext.Quote(g.Name), w.Name)
			case w.Image != g.Image:
				return fmt.Sprintf("%s[%d] (%s) runs image %s, not %s", cs.field, i, w.Name, errtext.Quote(g.Image), w.Image)
			case !apiequality.Semantic.DeepEqual(w.Command, g.Command) || !apiequality.Semantic.DeepEqual(w.Args, g.Args):
				return fmt.Sprintf("%s[%d] (%s) runs another command", cs.field, i, w.Name)
			case !apiequality.Semantic.DeepEqual(w.SecurityContext, g.SecurityContext):
				return fmt.Sprintf("%s[%d] (%s) has another securityContext", cs.field, i, w.Name)
			}
		}
	}
	return ""
}

// stepFailed is the Failure for the update's own upgrader pod failing.
func stepFailed(node string, pod *corev1.Pod, ps nodepod.Status) updateResult {
	step := "pod"
	var code int32
	if ps.Failed != nil {
		step, code = ps.Failed.Name, ps.Failed.ExitCode
	}
	res := failedAs(FailureStepFailed, "node %s: step %s failed with exit code %d: %s %s (pod %s/%s)", node, step, code, ps.Reason, ps.Message, pod.Namespace, pod.Name)
	res.step = step
	return res
}

// upgrading sets res.step to the first step of ps not yet done.
func upgrading(res updateResult, ps nodepod.Status) updateResult {
	for _, s := range ps.Steps {
		if s.Phase != nodepod.PhaseSucceeded {
			res.step = s.Name
			break
		}
	}
	return res
}

// upgraderPodsOn lists the upgrader pods (nodepod.NodeSelector) bound to node
// in namespace, where this updater creates them. Labels alone are anyone's
// to set: a pod carrying them in another namespace is not an upgrader pod
// of ours, blocks nothing and is drained like any other pod.
func upgraderPodsOn(ctx context.Context, c client.Client, namespace, node string) ([]corev1.Pod, error) {
	var list corev1.PodList
	// Only the node's pods are read (its LabelNode): with every node's
	// pod listed, each carrying its plan, a hundred updates held hundreds
	// of MiB at once (make e2e-scale). spec.nodeName stays the authority.
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: nodepod.NodeSelector(node)}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, p := range list.Items {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out, nil
}

// findPod returns the pod namespace/name key among pods, or nil.
func findPod(pods []corev1.Pod, key string) *corev1.Pod {
	for i := range pods {
		if pods[i].Namespace+"/"+pods[i].Name == key {
			return &pods[i]
		}
	}
	return nil
}

// podEnded: the pod runs no step any more and will not run one again. A
// pod being deleted counts as running until its containers have stopped.
func podEnded(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	if p.DeletionTimestamp != nil {
		return false
	}
	ph := nodepod.ReadStatus(p).Phase // a crash loop is Failed while the pod is Running
	return ph == nodepod.PhaseSucceeded || ph == nodepod.PhaseFailed
}

// clearOtherPods deals with the upgrader pods on the node other than ours
// (namespace/name; "" when the update has none): it answers "wait" while
// any of them runs, and deletes the finished ones in namespace deleteIn
// ("" deletes nothing), answering "wait" once more so that the next call
// starts from a node with no other upgrader pod. ok means there is none
// left that matters.
func (u *MachineUpdater) clearOtherPods(ctx context.Context, st *call, pods []corev1.Pod, ours, deleteIn string) (updateResult, bool) {
	var running, deleted []string
	for i := range pods {
		p := &pods[i]
		key := p.Namespace + "/" + p.Name
		if key == ours {
			continue
		}
		what := key
		if plan := p.Labels[nodepod.LabelPlan]; plan != "" {
			what += " (plan " + plan + ")"
		}
		if !podEnded(p) {
			running = append(running, what)
			continue
		}
		if deleteIn == "" || p.Namespace != deleteIn || p.DeletionTimestamp != nil {
			continue
		}
		if err := st.c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			return waiting(ReasonPending, "deleting the finished upgrader pod %s of an abandoned plan on node %s: %v", what, st.node.Name, err), false
		}
		st.log.Info("deleted the finished upgrader pod of an abandoned plan", "pod", key)
		deleted = append(deleted, what)
	}
	if len(running) > 0 {
		return waiting(ReasonPending, "upgrader pod %s of another plan is still running on node %s; waiting for it to end before going on (never two upgrader pods on one node)", strings.Join(running, ", "), st.node.Name), false
	}
	if len(deleted) > 0 {
		return waiting(ReasonPending, "deleted the finished upgrader pod %s of an abandoned plan on node %s", strings.Join(deleted, ", "), st.node.Name), false
	}
	return updateResult{}, true
}

// finish ends an update once the kubelet reports the desired version. It
// does not answer done, nor uncordon, while any upgrader pod on the node is
// Pending or Running: the kubelet reports the new version after the
// kubelet step, before the plan's verify step has run. In order:
//
//   - another plan's upgrader pod still running: wait (ReasonPending); its
//     finished pods are deleted first (only when the node has an update
//     record saying which namespace is ours), as in updateNode;
//   - the update's own pod (the record's Pod, when the record is for the
//     desired version) still running: wait (ReasonUpgrading), naming the
//     step; Failed (the verify step, say): Failure (FailureStepFailed),
//     the node stays cordoned and the record stays;
//   - otherwise (the pod Succeeded, and that is recorded on the Node
//     first; or a success was recorded already; or there was no update of
//     ours to this version: the node was already there, or the desired
//     version went back to the node's version before the pod of the
//     abandoned plan changed anything): uncordon (our cordon only), drop
//     the record, done. An update of ours whose pod is gone without a
//     recorded success never gets here: updateNode runs its plan again.
//
// A pod of an abandoned plan that Failed is not a Failure of this update:
// the kubelet reports the desired version, which is all the hook can check;
// whatever that plan changed before failing stays on the node (its backups
// stay under nodeexec's backup directory).
func (u *MachineUpdater) finish(ctx context.Context, st *call, rec *UpdateRecord, pods []corev1.Pod) updateResult {
	node, want := st.node, st.machine.Spec.Version
	ours, deleteIn := "", ""
	if rec != nil && rec.Pod != "" {
		deleteIn, _, _ = strings.Cut(rec.Pod, "/")
		if rec.Version == want {
			ours = rec.Pod
		}
	}
	if res, ok := u.clearOtherPods(ctx, st, pods, ours, deleteIn); !ok {
		res.msg = fmt.Sprintf("kubelet reports %s, but the update is not over: %s", want, res.msg)
		return res
	}
	if p := findPod(pods, ours); p != nil {
		if res, ok := u.ownPod(ctx, st, rec, p); !ok {
			return res
		}
		ps := nodepod.ReadStatus(p)
		switch {
		case ps.Phase == nodepod.PhaseFailed:
			return stepFailed(node.Name, p, ps)
		case !podEnded(p):
			return upgrading(waiting(ReasonUpgrading, "node %s: kubelet reports %s, but upgrader pod %s still runs (%.0f%% of %d steps done); not done before it ends",
				node.Name, want, ours, ps.Progress*100, len(ps.Steps)), ps)
		}
		var err error
		if rec, err = u.recordSuccess(ctx, st, rec); err != nil {
			return waiting(ReasonWaitingForKubelet, "kubelet reports %s and upgrader pod %s succeeded; recording it on node %s: %v", want, ours, node.Name, err)
		}
	}
	if _, cordoned := node.Annotations[drain.AnnotationCordon]; cordoned && u.clientset != nil {
		cs, err := u.clientset(ctx, st.cluster)
		if err != nil {
			return waiting(ReasonWaitingForKubelet, "kubelet reports %s; waiting for a clientset of the workload cluster to uncordon node %s: %v", want, node.Name, err)
		}
		res, err := drain.Uncordon(ctx, cs, node.Name, u.cordonOwner)
		var oe *drain.OwnershipError
		switch {
		case errors.As(err, &oe):
			st.log.V(1).Info("not uncordoning: the cordon is not ours", "holder", oe.Holder)
		case err != nil:
			return waiting(ReasonWaitingForKubelet, "kubelet reports %s; uncordoning node %s: %v", want, node.Name, err)
		case res.Uncordoned:
			st.log.Info("node uncordoned", "step", "uncordon")
		default:
			st.log.Info("node left cordoned", "step", "uncordon", "reason", res.Reason)
		}
	}
	msg := fmt.Sprintf("node %s runs kubelet %s", node.Name, want)
	if rec == nil {
		res := updateResult{done: true, msg: msg}
		if st.prev != nil && st.prev.Reason != ReasonSucceeded {
			res.phase = ReasonSucceeded // an update ended outside our sight: say so
		}
		return res
	}
	// What the plan applied and verified is kept on the Node, so that
	// later updates know it applied.
	for _, d := range []struct{ annotation, digest string }{
		{AnnotationKubeletArgs, rec.KubeletArgs},
		{AnnotationControlPlaneConfig, rec.ControlPlaneConfig},
		{AnnotationFiles, rec.Files},
	} {
		if d.digest == "" || rec.Succeeded == nil || node.Annotations[d.annotation] == d.digest {
			continue
		}
		if err := patchNodeAnnotation(ctx, st.c, node.Name, d.annotation, d.digest); err != nil {
			return waiting(ReasonWaitingForKubelet, "kubelet reports %s; recording %s on node %s: %v", want, d.annotation, node.Name, err)
		}
	}
	if err := u.forgetCertificatesExpiry(ctx, st, rec); err != nil {
		return waiting(ReasonWaitingForKubelet, "kubelet reports %s; removing the stale %s annotation from the Machine's KubeadmConfig: %v",
			want, clusterv1.MachineCertificatesExpiryDateAnnotation, err)
	}
	if err := st.writeRecord(ctx, nil); err != nil {
		return waiting(ReasonWaitingForKubelet, "kubelet reports %s; clearing the update record on node %s: %v", want, node.Name, err)
	}
	took := st.now.Sub(rec.Started.Time)
	u.metrics.updateDuration(took)
	u.event(st.machine, eventNormal, EventReasonUpdateSucceeded, "Update", "Node %s runs kubelet %s; the in-place update took %s", node.Name, want, took.Truncate(time.Second))
	return updateResult{done: true, finished: true, phase: ReasonSucceeded, msg: msg + "; in-place update done in " + took.Truncate(time.Second).String()}
}

// forgetCertificatesExpiry removes, after a control plane's update to a
// new version succeeded, KubeadmControlPlane's certificate expiry
// annotation (clusterv1.MachineCertificatesExpiryDateAnnotation) from the
// Machine's KubeadmConfig. `kubeadm upgrade` renewed the node's
// certificates (the plan sets certificateRenewal), so the date KubeadmControlPlane
// wrote when the machine was created is stale; KubeadmControlPlane writes
// the annotation only when it is absent, then from the certificate the
// node's API server presents, and Cluster API copies it to the Machine's
// status.certificatesExpiryDate, which rollout.before.certificatesExpiryDays
// is judged by. Left in place, it would have the machine replaced for
// certificates that were renewed. An annotation set on the Machine itself
// takes precedence in Cluster API and is left alone: it is the user's.
//
// It needs a management client that can write (WithManagementReader given
// a client.Client) and patch on KubeadmConfigs; without one, nothing is
// done and the log says so.
func (u *MachineUpdater) forgetCertificatesExpiry(ctx context.Context, st *call, rec *UpdateRecord) error {
	if rec.Succeeded == nil || rec.Role == string(kubeadm.RoleWorker) || rec.Role == "" ||
		rec.FromVersion == "" || rec.FromVersion == rec.Version {
		return nil // kubeadm upgrade did not run: nothing was renewed
	}
	ref := st.machine.Spec.Bootstrap.ConfigRef
	if u.mgmt == nil || !ref.IsDefined() || ref.Kind != "KubeadmConfig" || ref.APIGroup != bootstrapv1.GroupVersion.Group {
		return nil
	}
	// Unstructured, as checkBootstrapConfig reads it: a manager's client
	// reads it from the API server, with get only.
	cfg := &unstructured.Unstructured{}
	cfg.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	key := types.NamespacedName{Namespace: st.machine.Namespace, Name: ref.Name}
	if err := u.mgmt.Get(ctx, key, cfg); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if _, ok := cfg.GetAnnotations()[clusterv1.MachineCertificatesExpiryDateAnnotation]; !ok {
		return nil
	}
	w, ok := u.mgmt.(client.Writer)
	if !ok {
		st.log.Info("certificates renewed, but the management client cannot write: KubeadmConfig keeps its stale expiry date",
			"kubeadmConfig", key.String(), "annotation", clusterv1.MachineCertificatesExpiryDateAnnotation)
		return nil
	}
	patch := []byte(`{"metadata":{"annotations":{"` + clusterv1.MachineCertificatesExpiryDateAnnotation + `":null}}}`)
	if err := w.Patch(ctx, cfg, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	st.log.Info("certificates renewed by kubeadm upgrade: removed the KubeadmConfig's expiry date for KubeadmControlPlane to read again",
		"kubeadmConfig", key.String())
	return nil
}

// report writes the node condition when it changed, and records what
// starts with this answer: a failure, a blocked drain. Whether it starts
// here is read from the UpdateRecord's Reported, which is written with a
// compare-and-swap, so restarted or parallel extensions do not repeat it,
// even when the condition (a best-effort status write) cannot be written.
// Without a record, the condition as read decides.
func (u *MachineUpdater) report(ctx context.Context, st *call, res *updateResult) {
	if res.phase == "" {
		return
	}
	msg := res.msg
	if res.err != nil {
		msg = strings.TrimPrefix(res.err.Error(), ErrUpdateFailed.Error()+": ")
	}
	msg = truncate(msg, maxConditionMessage)
	prev := st.prev
	status := conditionStatus(res.phase)
	if prev == nil || prev.Reason != res.phase || prev.Message != msg || prev.Status != status {
		now := st.nowMeta()
		cond := corev1.NodeCondition{Type: ConditionInPlaceUpdate, Status: status, Reason: res.phase, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		if prev != nil && prev.Status == status {
			cond.LastTransitionTime = prev.LastTransitionTime
		}
		if err := patchCondition(ctx, st.c, st.node, cond); err != nil {
			// Best effort: the answer to CAPI is what matters; the next
			// call writes it again.
			st.log.V(1).Info("could not write the node condition", "error", err.Error())
		}
	}
	var key string
	var condNew bool // the condition as read says it starts here
	switch {
	case res.err != nil:
		key, condNew = reportedFailed+res.failure, prev == nil || prev.Reason != ReasonFailed
	case res.phase == ReasonDrainBlocked:
		key, condNew = ReasonDrainBlocked, prev == nil || prev.Reason != ReasonDrainBlocked
	}
	if !u.starts(ctx, st, key, condNew) {
		return
	}
	if res.err != nil {
		res.newFailure = true
		u.metrics.failure(res.failure)
		u.event(st.machine, eventWarning, EventReasonUpdateFailed, "Update", "%s", msg)
		u.ownerEvent(ctx, st.log, st.machine, msg)
		return
	}
	st.log.Info("drain blocked", "step", "drain", "message", msg)
	u.event(st.machine, eventWarning, EventReasonDrainBlocked, "Drain", "%s", msg)
}

// reportedFailed prefixes a Failure* reason in UpdateRecord.Reported.
const reportedFailed = "Failed/"

// starts tells whether the reportable state key ("" for none) starts with
// this answer, and records it in the node's UpdateRecord. condNew is the
// answer the condition as read gives, used when there is no record, and
// when the record cannot be written and does not already say key.
func (u *MachineUpdater) starts(ctx context.Context, st *call, key string, condNew bool) bool {
	if st.rec == nil {
		return key != "" && condNew
	}
	if st.rec.Reported == key {
		return false
	}
	next := *st.rec
	next.Reported = key
	raw, err := swapUpdateRecord(ctx, st.c, st.node.Name, st.recRaw, &next)
	if err == nil {
		st.rec, st.recRaw = &next, raw
		return key != ""
	}
	// Refused (another writer changed the record since it was read) or
	// failed: the record may already say it.
	st.log.V(1).Info("could not record the reported state on the node", "reported", key, "error", err.Error())
	if key == "" {
		return false
	}
	var n corev1.Node
	if err := st.c.Get(ctx, client.ObjectKeyFromObject(st.node), &n); err == nil {
		if r, _ := readUpdateRecord(&n); r != nil && r.Reported == key {
			return false
		}
	}
	return condNew
}

// maxRememberedFailures bounds the failures reportWithoutNode remembers.
// With WithManagementReader only live Machines get there; without it, the
// names a request gives do, and this keeps what a caller can make the
// process hold.
const maxRememberedFailures = 4096

// reportWithoutNode records a failure found before any node is known,
// remembering it in memory (at most maxRememberedFailures) so that
// retries do not repeat it.
func (u *MachineUpdater) reportWithoutNode(ctx context.Context, log logr.Logger, m *clusterv1.Machine, res *updateResult) {
	key := m.Namespace + "/" + m.Name
	u.mu.Lock()
	prev, known := u.lastFailure[key]
	repeat := known && prev == res.failure
	if !known && len(u.lastFailure) >= maxRememberedFailures {
		for k := range u.lastFailure { // forget one: a repeat may be reported again
			delete(u.lastFailure, k)
			break
		}
	}
	u.lastFailure[key] = res.failure
	u.mu.Unlock()
	if repeat {
		return
	}
	res.newFailure = true
	u.metrics.failure(res.failure)
	note := strings.TrimPrefix(res.err.Error(), ErrUpdateFailed.Error()+": ")
	u.event(m, eventWarning, EventReasonUpdateFailed, "Update", "%s", note)
	u.ownerEvent(ctx, log, m, note)
}

func (u *MachineUpdater) forgetFailure(m *clusterv1.Machine) {
	u.mu.Lock()
	delete(u.lastFailure, m.Namespace+"/"+m.Name)
	u.mu.Unlock()
}

const (
	eventNormal  = corev1.EventTypeNormal
	eventWarning = corev1.EventTypeWarning
)

// event records an Event on the Machine, if a recorder is set.
func (u *MachineUpdater) event(m *clusterv1.Machine, typ, reason, action, note string, args ...any) {
	if u.recorder == nil {
		return
	}
	obj := m.DeepCopy()
	obj.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Machine"))
	u.recorder.Eventf(obj, nil, typ, reason, action, note, args...)
}

// Errors of findNode.
var (
	errNoNode        = errors.New("no node")
	errAmbiguousNode = errors.New("more than one node")
)

// findNode finds the Node whose spec.providerID is id. The name found last
// time is tried first with a Get (one object, not a list of every node on
// every call) and used if its providerID still matches; otherwise all
// Nodes are listed, and two Nodes with the same providerID are an error:
// updating either could update the wrong machine.
func (u *MachineUpdater) findNode(ctx context.Context, c client.Client, cluster types.NamespacedName, id string) (*corev1.Node, error) {
	cacheKey := cluster.String() + "\x00" + id
	u.mu.Lock()
	name, ok := u.nodeNames[cacheKey]
	u.mu.Unlock()
	if ok {
		var n corev1.Node
		err := c.Get(ctx, types.NamespacedName{Name: name}, &n)
		if err == nil && n.Spec.ProviderID == id {
			return &n, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	var found []*corev1.Node
	for i := range nodes.Items {
		if nodes.Items[i].Spec.ProviderID == id {
			found = append(found, &nodes.Items[i])
		}
	}
	switch len(found) {
	case 0:
		u.mu.Lock()
		delete(u.nodeNames, cacheKey)
		u.mu.Unlock()
		return nil, fmt.Errorf("%w with spec.providerID %s", errNoNode, errtext.Quote(id))
	case 1:
		u.mu.Lock()
		u.nodeNames[cacheKey] = found[0].Name
		u.mu.Unlock()
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, n := range found {
		names[i] = n.Name
	}
	return nil, fmt.Errorf("%w with spec.providerID %s: %s", errAmbiguousNode, errtext.Quote(id), errtext.Clip(strings.Join(names, ", ")))
}

// NodeGoneConfigMap is the ConfigMap, in the upgrader pods' namespace of
// the workload cluster, where MachineUpdater records since when each
// machine's Node has been missing (key "<namespace>.<machine>", value an
// RFC 3339 time): the Node, which holds every other piece of an update's
// state, is what is gone, and the node-gone grace must survive a restart
// of the extension.
const NodeGoneConfigMap = "upgradekit-nodes-gone"

// nodeGoneKey is the ConfigMap key of a machine ("namespace/name"):
// namespaces have no dots, so "namespace.name" is unique.
func nodeGoneKey(machine string) string { return strings.Replace(machine, "/", ".", 1) }

// nodeMissingFor returns how long the machine's node has been missing,
// counting from the first call that did not find it, as recorded in
// NodeGoneConfigMap (and in memory, when the record cannot be written:
// then a restarted extension starts counting again).
func (u *MachineUpdater) nodeMissingFor(ctx context.Context, c client.Client, machine string, now time.Time) time.Duration {
	u.mu.Lock()
	since, ok := u.missingSince[machine]
	if !ok {
		since = now
		u.missingSince[machine] = now
	}
	u.mu.Unlock()
	key := nodeGoneKey(machine)
	var cm corev1.ConfigMap
	err := c.Get(ctx, types.NamespacedName{Namespace: u.podNamespace, Name: NodeGoneConfigMap}, &cm)
	switch {
	case err == nil:
		if t, perr := time.Parse(time.RFC3339, cm.Data[key]); perr == nil {
			if t.Before(since) {
				since = t
			}
			break
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = since.UTC().Format(time.RFC3339)
		_ = c.Update(ctx, &cm) // a conflict is retried on the next call
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: u.podNamespace, Name: NodeGoneConfigMap,
			Labels: map[string]string{nodepod.LabelManagedBy: nodepod.ManagedByValue}},
			Data: map[string]string{key: since.UTC().Format(time.RFC3339)}}
		_ = c.Create(ctx, &cm) // no namespace yet: counted in memory only
	}
	return now.Sub(since)
}

// nodeFound forgets that the machine's node was missing. The ConfigMap is
// read only when this process saw it missing, or once per process and
// machine otherwise, so that found nodes cost no extra read on every call.
func (u *MachineUpdater) nodeFound(ctx context.Context, c client.Client, machine string) {
	u.mu.Lock()
	_, wasMissing := u.missingSince[machine]
	delete(u.missingSince, machine)
	checked := u.goneChecked[machine]
	u.goneChecked[machine] = true
	u.mu.Unlock()
	if !wasMissing && checked {
		return
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: u.podNamespace, Name: NodeGoneConfigMap}, &cm); err != nil {
		return
	}
	if _, ok := cm.Data[nodeGoneKey(machine)]; ok {
		delete(cm.Data, nodeGoneKey(machine))
		_ = c.Update(ctx, &cm) // best effort; a failed update is retried by the next process that finds the node
	}
}

// AnnotationRetry is the Machine annotation (in the management cluster)
// with which an operator retries a failed in-place update: set it, or
// change its value, to any new string (a date, say):
//
//	kubectl annotate machine NAME upgradekit.io/retry-update="$(date +%s)" --overwrite
//
// When an update recorded on the node is answered Failure (a failed step,
// a refused pod, a deadline) and the Machine's value differs from the one
// the update last consumed, the next answer starts a new attempt instead:
// the failed upgrader pod is deleted, the attempt's plan gets a name of its
// own, so it runs with a new journal on the host (a failed, rolled back or
// stale journal from another from-version cannot stop it), and the update
// deadline and, if the drain had not finished, the drain deadline start
// again. The node stays cordoned while the drain had finished. One value
// is one retry: a new attempt that fails again needs a new value. A value
// present when the update starts, or set while it goes well, asks for
// nothing. While the update's own upgrader pod still runs (a deadline
// passed), the Failure stays and the retry waits for that pod to end.
//
// With WithManagementReader the value is read from the live Machine; the
// request's copy is not trusted. Failures with no update recorded on a
// node (the node is gone, ambiguous or claimed; the request does not
// match) are not retried this way: they end when their cause does.
const AnnotationRetry = "upgradekit.io/retry-update"

// retry turns a Failure of an update recorded on the node into the start
// of a new attempt when the Machine asks for one (AnnotationRetry).
func (u *MachineUpdater) retry(ctx context.Context, st *call, res updateResult) updateResult {
	if res.err == nil || st.rec == nil {
		return res
	}
	token := st.machine.Annotations[AnnotationRetry]
	if token == "" || token == st.rec.RetryToken {
		return res
	}
	pods, err := upgraderPodsOn(ctx, st.c, u.podNamespace, st.node.Name)
	if err != nil {
		return res
	}
	failed := findPod(pods, st.rec.Pod)
	if failed != nil && !podEnded(failed) {
		res.err = fmt.Errorf("%w; a retry is asked for (%s=%q), and starts once upgrader pod %s ends", res.err, AnnotationRetry, token, st.rec.Pod)
		return res
	}
	next := *st.rec
	next.Attempt++
	next.RetryToken = token
	next.Pod, next.FromVersion = "", ""
	next.Succeeded = nil
	next.Reported = ""
	next.Started = st.nowMeta()
	if next.Drained == nil && next.DrainStarted != nil {
		next.DrainStarted = &next.Started
	}
	prePullFailed := next.PrePulled == nil && next.DrainStarted == nil
	if prePullFailed {
		// The pre-pull failed: the new attempt pulls again, with a new
		// deadline, from a new pod.
		next.PrePullStarted = nil
	}
	if err := st.writeRecord(ctx, &next); err != nil {
		return res
	}
	if failed != nil && failed.Namespace == u.podNamespace {
		if err := st.c.Delete(ctx, failed); err != nil && !apierrors.IsNotFound(err) {
			st.log.Info("deleting the failed upgrader pod for a retry; the next call deletes it", "pod", failed.Namespace+"/"+failed.Name, "error", err.Error())
		}
	}
	if prePullFailed {
		if err := u.deletePrePullPods(ctx, st, ""); err != nil {
			st.log.Info("deleting the failed pre-pull pod for a retry; the next call deletes it", "error", err.Error())
		}
	}
	st.log.Info("in-place update retried", "attempt", next.Attempt, "after", res.failure)
	u.event(st.machine, eventNormal, EventReasonUpdateRetried, "Update", "Attempt %d of the in-place update of node %s to %s, asked for by %s=%q after %s",
		next.Attempt+1, st.node.Name, next.Version, AnnotationRetry, token, res.failure)
	return waiting(ReasonPending, "retrying the update of node %s to %s (attempt %d, %s=%q) after: %v", st.node.Name, next.Version, next.Attempt+1, AnnotationRetry, token, res.err)
}
