package capi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// MachineUpdater answers CAPI's UpdateMachine hook by upgrading the
// machine's node in place with a kubeadm plan (nodeexec/kubeadm) run by an
// upgrader pod (nodeexec/nodepod) on that node.
//
// By default it drains the node first (see UpdaterOptions.SkipDrain): once a pre-pull
// pod has proven that the upgrader image pulls and starts on the node
// (UpdaterOptions.PrePullTimeout, UpdaterOptions.SkipPrePull; observe.FailureImagePull otherwise, on an
// uncordoned node), it cordons the node as DefaultCordonOwner, evicts its pods through the Eviction API in a
// bounded attempt per call (UpdaterOptions.DrainAttempt), answers RetryAfterSeconds
// with the PodDisruptionBudgets and pods in the way while the drain is
// unfinished, and Failure once it stays unfinished past UpdaterOptions.DrainTimeout.
// The upgrader pod starts only once the node is drained, and the node is
// uncordoned (only if this updater cordoned it) once the kubelet reports
// the desired version, before the answer "done".
//
// It keeps no state in memory: the Node (found through spec.providerID,
// since CAPI strips status from the request) with its observe.UpdateRecord
// (observe.AnnotationInPlaceUpdate) and cordon record, and the upgrader pods on the
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
// (observe.FailurePlanRejected, observe.FailurePodRejected) with the node left as it was.
// When it drains, the pre-pull comes next, still before the cordon: an
// upgrader image the node cannot pull is a Failure (observe.FailureImagePull)
// with the node left as it was, not an upgrader pod in ImagePullBackOff
// on a drained node until the update deadline.
//
// A worker's version change to a minor above the control plane's does
// not start until every control plane Node runs the target minor, with no
// in-place update unfinished on it (observe.ReasonPending, naming the node):
// ControlPlaneSkewCheck accepts such a change while the control plane is
// on its way to the version, since Cluster API's MachineDeployment does
// not order workers after the control plane.
//
// It answers RetryAfterSeconds > 0 while the update runs; 0 ("done") only
// once the node's kubelet reports the desired version AND no upgrader pod
// on the node is Pending or Running AND, for an update it started, the
// update's own pod was seen Succeeded and that is recorded on the Node
// (observe.UpdateRecord.Succeeded). A reported version alone is no proof: the
// kubelet reports the new version before the plan's verify step has run,
// and a pod deleted before its success was seen is created again (it
// resumes from the journal on the host). Failure (starting with a Failure* reason; for a failed
// step, its name and exit code) on a terminal failure, including the
// update's own pod failing after the kubelet reports the version. A desired
// version set back to the node's version mid-update is done once the
// abandoned plan's pod has ended and has been deleted; if that pod had
// already upgraded the kubelet, going back is a downgrade and is refused
// (observe.FailurePlanRejected).
//
// Progress is visible as the Node condition observe.ConditionInPlaceUpdate, as
// Events on the Machine, and failures also on its MachineDeployment or
// KubeadmControlPlane (UpdaterOptions.EventRecorder), in Prometheus metrics
// (UpdaterOptions.Metrics) and in logs with the keys machine, cluster, node,
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
	gates        []strategy.Gate // as given to UpdaterOptions.Gates, checked by NewMachineUpdater

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
	// images picks the pod's image by target version (UpdaterOptions.Images).
	images          ImagesByVersion
	updateTimeout   time.Duration
	notReadyTimeout time.Duration
	mgmt            client.Reader
	// unreachableSince is when each machine's workload cluster was first
	// found unreachable in the current run of failed calls (this process).
	unreachableSince   map[string]time.Time
	unreachableTimeout time.Duration
}

// maxGateRetryAfter caps the RetryAfterSeconds of a closed gate's answer,
// so that Cluster API asks again, and a gate changed meanwhile is seen,
// at least this often.
const maxGateRetryAfter = time.Hour

// DefaultNodeGoneGrace is how long UpdateMachine waits for a machine's
// Node to (re)appear before it answers Failure (observe.FailureNodeGone).
const DefaultNodeGoneGrace = 10 * time.Minute

// NewMachineUpdater builds the UpdateMachine handler from opts (see
// UpdaterOptions for each field's default). Draining is on by default, so
// it needs opts.Clientset, or opts.SkipDrain. Its errors match
// ErrInvalidOption and name the field.
func NewMachineUpdater(workload workload.Client, opts UpdaterOptions) (*MachineUpdater, error) {
	return newMachineUpdater(workload, opts)
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
		log.V(1).Info("request refused", "reason", observe.FailureInvalidMachine, "error", err.Error())
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage(fmt.Errorf("%w: %s: %w", ErrUpdateFailed, observe.FailureInvalidMachine, err).Error())
		return
	}
	log = log.WithValues("machine", m.Namespace+"/"+m.Name, "cluster", m.Namespace+"/"+m.Spec.ClusterName)
	res := u.update(ctx, log, m, req.Desired)
	// From here on, m is the Machine acted on: the live one (with
	// UpdaterOptions.ManagementReader), nil when the request was refused before.
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
		u.metrics.track(key, observe.ReasonFailed)
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
		if secs := int32(min(res.retryAfter, maxGateRetryAfter).Round(time.Second) / time.Second); secs > resp.RetryAfterSeconds {
			resp.RetryAfterSeconds = secs
		}
	}
}

// ErrUpdateFailed is matched by terminal update failures.
var ErrUpdateFailed = errors.New("in-place update failed")

type updateResult struct {
	// retryAfter, when set, replaces UpdaterOptions.RetryAfter's in the answer.
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
	return updateResult{phase: observe.ReasonFailed, failure: reason,
		err: fmt.Errorf("%w: %s: %s", ErrUpdateFailed, reason, fmt.Sprintf(format, args...))}
}

// call is what one UpdateMachine call knows once the node is found.
type call struct {
	machine *clusterv1.Machine
	cluster types.NamespacedName
	c       client.Client
	node    *corev1.Node
	prev    *corev1.NodeCondition // observe.ConditionInPlaceUpdate as read
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
	// rec is the node's observe.UpdateRecord as this call last read or wrote it,
	// and recRaw its annotation value ("" for none).
	rec    *observe.UpdateRecord
	recRaw string
}

func (st *call) nowMeta() metav1.Time { return metav1.NewTime(st.now) }

// writeRecord writes (nil: removes) the node's observe.UpdateRecord and remembers it.
func (st *call) writeRecord(ctx context.Context, rec *observe.UpdateRecord) error {
	raw, err := writeUpdateRecord(ctx, st.c, st.node.Name, rec)
	if err != nil {
		return err
	}
	st.rec, st.recRaw = rec, raw
	return nil
}

// update checks the request (UpdaterOptions.ManagementReader) and moves the update of
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
			res := failedAs(observe.FailureInvalidMachine, "desired %s", errtext.Clip(err.Error()))
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
// UpdaterOptions.ManagementReader) one step; spec is its KubeadmConfig's.
func (u *MachineUpdater) updateMachine(ctx context.Context, log logr.Logger, m *clusterv1.Machine, spec *bootstrapv1.KubeadmConfigSpec) updateResult {
	var res updateResult
	args := desiredKubeletArgs(spec)
	_, isCP := m.Labels[clusterv1.MachineControlPlaneLabel]
	cpc := desiredControlPlaneConfig(spec, isCP)
	files := desiredFiles(spec)
	switch {
	case m.Spec.ProviderID == "":
		res = failedAs(observe.FailureInvalidMachine, "desired Machine has no spec.providerID: the node cannot be found")
	case m.Spec.Version == "":
		res = failedAs(observe.FailureInvalidMachine, "desired Machine has no spec.version")
	case m.Spec.ClusterName == "":
		res = failedAs(observe.FailureInvalidMachine, "desired Machine has no spec.clusterName")
	}
	var to *version.Version
	if res.err == nil {
		var err error
		if to, err = version.ParseSemantic(m.Spec.Version); err != nil {
			res = failedAs(observe.FailureInvalidMachine, "spec.version %s: %s", errtext.Quote(m.Spec.Version), errtext.Clip(err.Error()))
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
		res = failedAs(observe.FailureAmbiguousNode, "%v: the machine's node cannot be told apart", err)
		u.reportWithoutNode(ctx, log, m, &res)
		return res
	case errors.Is(err, errNoNode):
		missing := u.nodeMissingFor(ctx, c, key, u.clock.Now())
		if u.nodeGoneGrace > 0 && missing > u.nodeGoneGrace {
			res = failedAs(observe.FailureNodeGone, "%v for %s (grace %s): the node is gone; the machine needs replacing", err, missing.Truncate(time.Second), u.nodeGoneGrace)
			u.reportWithoutNode(ctx, log, m, &res)
			return res
		}
		return waiting(observe.ReasonPending, "waiting for the node: %v (for %s)", err, missing.Truncate(time.Second))
	}
	u.nodeFound(ctx, c, key)
	if rec, _ := readUpdateRecord(node); rec != nil && rec.Machine != "" && rec.Machine != key {
		// Not reported on the node: its condition and record are the
		// other machine's.
		res = failedAs(observe.FailureNodeClaimed, "node %s is being updated for machine %s (annotation %s), and machine %s names the same node (spec.providerID %s): one node, one machine; if %s is gone, remove the annotation",
			node.Name, rec.Machine, observe.AnnotationInPlaceUpdate, key, errtext.Quote(m.Spec.ProviderID), rec.Machine)
		res.node = node.Name
		u.reportWithoutNode(ctx, log, m, &res)
		return res
	}
	u.forgetFailure(m)
	st := &call{machine: m, cluster: cluster, c: c, node: node, prev: observe.InPlaceUpdateCondition(node), now: u.clock.Now(), log: log.WithValues("node", node.Name), args: args, cp: cpc, files: files}
	res = u.updateNode(ctx, st, to)
	res = u.deadlines(st, res)
	res = u.retry(ctx, st, res)
	res.node = node.Name
	u.report(ctx, st, &res)
	return res
}
