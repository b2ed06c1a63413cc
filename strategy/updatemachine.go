package strategy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// WorkloadClient returns a client for the workload cluster a Machine
// belongs to (in a real extension: built from the <cluster>-kubeconfig
// secret, or CAPI's ClusterCache).
type WorkloadClient func(ctx context.Context, cluster types.NamespacedName) (client.Client, error)

// MachineUpdater answers CAPI's UpdateMachine hook by upgrading the
// machine's node in place with a kubeadm plan (nodeexec/kubeadm) run by an
// upgrader pod (nodeexec/nodepod) on that node.
//
// By default it drains the node first (see WithoutDrain): it cordons the
// node as DefaultCordonOwner, evicts its pods through the Eviction API in a
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
// starts, the target version and the kubeadm role (read once from
// kube-system/kubeadm-config, which `kubeadm upgrade apply` changes
// mid-update), and, before the pod is created, the upgrader pod: the plan
// and its pod stay the same for the whole update.
//
// There is never more than one upgrader pod running on a node: before
// creating one, UpdateMachine lists the upgrader pods on the node
// (nodepod.Selector, any namespace) and waits while one of another plan (a
// changed desired version, say) is Pending or Running; finished pods of
// other plans in its own namespace are deleted first. The workload client
// therefore needs to list pods in all namespaces, as the drain does.
//
// It answers RetryAfterSeconds > 0 while the update runs; 0 ("done") only
// once the node's kubelet reports the desired version AND no upgrader pod
// on the node is Pending or Running AND the update's own pod, if any,
// succeeded (the kubelet reports the new version before the plan's verify
// step has run); Failure (starting with a Failure* reason; for a failed
// step, its name and exit code) on a terminal failure, including the
// update's own pod failing after the kubelet reports the version. A desired
// version set back to the node's version mid-update is done once the
// abandoned plan's pod has ended and has been deleted; if that pod had
// already upgraded the kubelet, going back is a downgrade and is refused
// (FailurePlanRejected).
//
// Progress is visible as the Node condition ConditionInPlaceUpdate, as
// Events on the Machine (WithEventRecorder), in Prometheus metrics
// (WithUpdaterMetrics) and in logs with the keys machine, cluster, node,
// phase and step.
type MachineUpdater struct {
	workload     WorkloadClient
	clientset    WorkloadClientset
	podOpts      []nodepod.Option
	planHook     func(*kubeadm.Config)
	retryAfter   int32
	log          logr.Logger
	drain        bool
	drainTimeout time.Duration
	drainAttempt time.Duration
	drainOpts    []drain.Option
	cordonOwner  string
	recorder     events.EventRecorder
	metrics      *Metrics
	clock        clock.PassiveClock

	mu          sync.Mutex
	lastFailure map[string]string // machine -> failure reason, for requests with no node to keep it on
}

// MachineUpdaterOption configures a MachineUpdater.
type MachineUpdaterOption func(*MachineUpdater)

// WithPodOptions passes options to the upgrader pod builder (image, mode,
// runner command, tolerations...). nodepod.WithImage is required.
func WithPodOptions(opts ...nodepod.Option) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.podOpts = append(u.podOpts, opts...) }
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
// management cluster, with the EventReason* reasons. A controller-runtime
// manager hands one out with mgr.GetEventRecorder(name); without a manager
// use k8s.io/client-go/tools/events.NewBroadcaster. The recorder's scheme
// needs no CAPI types: the Machine carries its kind.
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

// NewMachineUpdater builds the UpdateMachine handler. Draining is on by
// default, so it needs WithWorkloadClientset, or WithoutDrain.
func NewMachineUpdater(workload WorkloadClient, opts ...MachineUpdaterOption) (*MachineUpdater, error) {
	if workload == nil {
		return nil, fmt.Errorf("%w: nil workload client getter", ErrInvalidRule)
	}
	u := &MachineUpdater{
		workload: workload, retryAfter: 15,
		drain: true, drainTimeout: DefaultDrainTimeout, drainAttempt: DefaultDrainAttempt, cordonOwner: DefaultCordonOwner,
		clock: clock.RealClock{}, lastFailure: map[string]string{},
	}
	for _, o := range opts {
		o(u)
	}
	switch {
	case u.retryAfter <= 0:
		return nil, fmt.Errorf("%w: retry after %d seconds: must be positive", ErrInvalidRule, u.retryAfter)
	case u.drain && u.clientset == nil:
		return nil, fmt.Errorf("%w: draining (on by default) needs WithWorkloadClientset; pass WithoutDrain to update nodes without draining them", ErrInvalidRule)
	case u.drainAttempt <= 0:
		return nil, fmt.Errorf("%w: drain attempt %s: must be positive", ErrInvalidRule, u.drainAttempt)
	case u.drainTimeout < 0:
		return nil, fmt.Errorf("%w: drain timeout %s: must not be negative", ErrInvalidRule, u.drainTimeout)
	case u.cordonOwner == "":
		return nil, fmt.Errorf("%w: empty cordon owner", ErrInvalidRule)
	case u.clock == nil:
		return nil, fmt.Errorf("%w: nil clock", ErrInvalidRule)
	}
	return u, nil
}

// Handler returns the handler to register on CAPI's runtime server.
func (u *MachineUpdater) Handler(namePrefix string) server.ExtensionHandler {
	return server.ExtensionHandler{Hook: runtimehooksv1.UpdateMachine, Name: namePrefix + "-update-machine", HandlerFunc: u.UpdateMachine}
}

// UpdateMachine answers the hook. It is idempotent and driven by the desired
// Machine only.
func (u *MachineUpdater) UpdateMachine(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
	m := &req.Desired.Machine
	key := m.Namespace + "/" + m.Name
	log := u.log
	if log.GetSink() == nil {
		log = logr.FromContextOrDiscard(ctx)
	}
	log = log.WithValues("hook", "UpdateMachine", "machine", key, "cluster", m.Namespace+"/"+m.Spec.ClusterName)
	res := u.update(ctx, log, m)
	log = log.WithValues("phase", res.phase)
	if res.node != "" {
		log = log.WithValues("node", res.node)
	}
	if res.step != "" {
		log = log.WithValues("step", res.step)
	}
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
	}
}

// ErrUpdateFailed is matched by terminal update failures.
var ErrUpdateFailed = errors.New("in-place update failed")

type updateResult struct {
	done     bool
	finished bool   // done, and this call ended an update recorded on the node
	phase    string // a Reason* constant; "" when there is nothing to show
	msg      string
	err      error  // terminal; wraps ErrUpdateFailed
	failure  string // a Failure* constant, with err
	node     string
	step     string
	// newFailure: this answer starts a failure (not a repeat of the last).
	newFailure bool
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

func (u *MachineUpdater) update(ctx context.Context, log logr.Logger, m *clusterv1.Machine) updateResult {
	var res updateResult
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
			res = failedAs(FailureInvalidMachine, "spec.version %q: %v", m.Spec.Version, err)
		}
	}
	if res.err != nil {
		u.reportWithoutNode(m, &res)
		return res
	}
	cluster := types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}
	c, err := u.workload(ctx, cluster)
	if err != nil {
		return waiting(ReasonPending, "waiting for the workload cluster: %v", err)
	}
	node, err := nodeByProviderID(ctx, c, m.Spec.ProviderID)
	if err != nil {
		return waiting(ReasonPending, "waiting for the node: %v", err)
	}
	u.forgetFailure(m)
	st := &call{machine: m, cluster: cluster, c: c, node: node, prev: InPlaceUpdateCondition(node), now: u.clock.Now(), log: log.WithValues("node", node.Name)}
	res = u.updateNode(ctx, st, to)
	res.node = node.Name
	u.report(ctx, st, &res)
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
	pods, err := upgraderPodsOn(ctx, st.c, node.Name)
	if err != nil {
		return waiting(ReasonPending, "listing the upgrader pods on node %s: %v", node.Name, err)
	}
	if current == want {
		return u.finish(ctx, st, rec, pods)
	}
	switch {
	case rec == nil || rec.Version != want:
		role, res, ok := u.role(ctx, st, to)
		if !ok {
			return res
		}
		rec = &UpdateRecord{Machine: m.Namespace + "/" + m.Name, Version: want, Started: st.nowMeta(), Role: string(role)}
		if u.drain {
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
	if u.drain && rec.Drained == nil {
		if res, ok := u.drainNode(ctx, st, rec); !ok {
			res.step = "drain"
			return res
		}
	}
	return u.runPlan(ctx, st, rec, pods)
}

// role is the kubeadm role of the machine's node for an update to
// version to, read from the Machine and kube-system/kubeadm-config. Only
// called when an update starts: the answer changes during the update.
func (u *MachineUpdater) role(ctx context.Context, st *call, to *version.Version) (kubeadm.Role, updateResult, bool) {
	if _, cp := st.machine.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
		return kubeadm.RoleWorker, updateResult{}, true
	}
	clusterVersion, err := kubeadmClusterVersion(ctx, st.c)
	if err != nil {
		return "", waiting(ReasonPending, "waiting for the kubeadm-config ConfigMap: %v", err), false
	}
	if clusterVersion.LessThan(to) {
		return kubeadm.RoleFirstControlPlane, updateResult{}, true
	}
	return kubeadm.RoleControlPlane, updateResult{}, true
}

// runPlan builds the update's plan and pod, waits for or clears the other
// upgrader pods on the node, creates the pod and reads its status.
func (u *MachineUpdater) runPlan(ctx context.Context, st *call, rec *UpdateRecord, pods []corev1.Pod) updateResult {
	c, node := st.c, st.node.Name
	current, want, role := st.node.Status.NodeInfo.KubeletVersion, rec.Version, kubeadm.Role(rec.Role)
	from := current
	if rec.Pod != "" && rec.FromVersion != "" && findPod(pods, rec.Pod) != nil {
		from = rec.FromVersion // the plan the existing pod runs
	}
	cfg := kubeadm.Config{Node: node, Role: role, FromVersion: from, ToVersion: want}
	if u.planHook != nil {
		u.planHook(&cfg)
	}
	plan, err := kubeadm.NewPlan(cfg)
	if err != nil {
		return failedAs(FailurePlanRejected, "node %s from %s to %s: %v", node, from, want, err)
	}
	pod, err := nodepod.Build(plan, u.podOpts...)
	if err != nil {
		return failedAs(FailurePodBuild, "building the upgrader pod: %v", err)
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
	case err != nil:
		return waiting(ReasonPending, "upgrader pod: %v", err)
	case created:
		st.log.Info("upgrader pod created", "pod", key, "role", string(role))
		return waiting(ReasonUpgrading, "started %s upgrade of node %s from %s to %s (pod %s)", role, node, from, want, key)
	}
	ps := nodepod.ReadStatus(got)
	switch ps.Phase {
	case nodepod.PhaseFailed:
		return stepFailed(node, got, ps)
	case nodepod.PhaseSucceeded:
		return waiting(ReasonWaitingForKubelet, "upgrade steps done on %s; waiting for the kubelet to report %s (reports %s)", node, want, current)
	}
	return upgrading(waiting(ReasonUpgrading, "upgrading node %s: %.0f%% of %d steps done", node, ps.Progress*100, len(ps.Steps)), ps)
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

// upgraderPodsOn lists the upgrader pods (nodepod.Selector, any namespace)
// bound to node.
func upgraderPodsOn(ctx context.Context, c client.Client, node string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.MatchingLabelsSelector{Selector: nodepod.Selector()}); err != nil {
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
// kubelet-restart step, before the plan's verify step has run. In order:
//
//   - another plan's upgrader pod still running: wait (ReasonPending); its
//     finished pods are deleted first (only when the node has an update
//     record saying which namespace is ours), as in updateNode;
//   - the update's own pod (the record's Pod, when the record is for the
//     desired version) still running: wait (ReasonUpgrading), naming the
//     step; Failed (the verify step, say): Failure (FailureStepFailed),
//     the node stays cordoned and the record stays;
//   - otherwise (the pod Succeeded, or there is none: the update needed
//     no pod, or the desired version went back to the node's version
//     before the pod of the abandoned plan changed anything, or someone
//     deleted the pod): uncordon (our cordon only), drop the record, done.
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
		ps := nodepod.ReadStatus(p)
		switch {
		case ps.Phase == nodepod.PhaseFailed:
			return stepFailed(node.Name, p, ps)
		case !podEnded(p):
			return upgrading(waiting(ReasonUpgrading, "node %s: kubelet reports %s, but upgrader pod %s still runs (%.0f%% of %d steps done); not done before it ends",
				node.Name, want, ours, ps.Progress*100, len(ps.Steps)), ps)
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
	if err := st.writeRecord(ctx, nil); err != nil {
		return waiting(ReasonWaitingForKubelet, "kubelet reports %s; clearing the update record on node %s: %v", want, node.Name, err)
	}
	took := st.now.Sub(rec.Started.Time)
	u.metrics.updateDuration(took)
	u.event(st.machine, eventNormal, EventReasonUpdateSucceeded, "Update", "Node %s runs kubelet %s; the in-place update took %s", node.Name, want, took.Truncate(time.Second))
	return updateResult{done: true, finished: true, phase: ReasonSucceeded, msg: msg + "; in-place update done in " + took.Truncate(time.Second).String()}
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

// reportWithoutNode records a failure found before any node is known,
// remembering it in memory so that retries do not repeat it.
func (u *MachineUpdater) reportWithoutNode(m *clusterv1.Machine, res *updateResult) {
	key := m.Namespace + "/" + m.Name
	u.mu.Lock()
	repeat := u.lastFailure[key] == res.failure
	u.lastFailure[key] = res.failure
	u.mu.Unlock()
	if repeat {
		return
	}
	res.newFailure = true
	u.metrics.failure(res.failure)
	u.event(m, eventWarning, EventReasonUpdateFailed, "Update", "%s", strings.TrimPrefix(res.err.Error(), ErrUpdateFailed.Error()+": "))
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

// nodeByProviderID finds the Node whose spec.providerID is id.
func nodeByProviderID(ctx context.Context, c client.Client, id string) (*corev1.Node, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	for i := range nodes.Items {
		if nodes.Items[i].Spec.ProviderID == id {
			return &nodes.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no node with providerID %q", id)
}

// kubeadmClusterVersion reads kubernetesVersion from kube-system/kubeadm-config:
// kubeadm upgrade apply raises it, so the first control plane machine to
// reach a version is the one whose cluster version is still older.
func kubeadmClusterVersion(ctx context.Context, c client.Client) (*version.Version, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "kubeadm-config"}, &cm); err != nil {
		return nil, err
	}
	var cc struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
		return nil, fmt.Errorf("ClusterConfiguration: %w", err)
	}
	v, err := version.ParseSemantic(cc.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("ClusterConfiguration.kubernetesVersion %q: %w", cc.KubernetesVersion, err)
	}
	return v, nil
}
