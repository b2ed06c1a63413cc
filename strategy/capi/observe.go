package capi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ConditionInPlaceUpdate is the Node condition MachineUpdater writes on the
// workload cluster's Node, so that `kubectl describe node` shows how the
// in-place update goes. Its status is True while an update is under way
// (reasons ReasonPending, ReasonDraining, ReasonDrainBlocked,
// ReasonUpgrading, ReasonWaitingForKubelet) and False once it is over
// (ReasonSucceeded) or has failed (ReasonFailed; Cluster API keeps calling,
// so a failed update that becomes possible again, say after a PDB is
// relaxed, goes back to True).
const ConditionInPlaceUpdate corev1.NodeConditionType = "upgradekit.io/InPlaceUpdate"

// Reasons of ConditionInPlaceUpdate. They are stable: alert on them. They
// are also the values of the "phase" label of MetricMachinesInProgress.
const (
	// ReasonPending: waiting for something outside the node's update (the
	// workload cluster, kubeadm-config, the upgrader pod of an earlier plan,
	// and, for a worker's version change, the control plane nodes to run
	// the target minor first).
	ReasonPending = "Pending"
	// ReasonDraining: the node is cordoned and its pods are being evicted.
	ReasonDraining = "Draining"
	// ReasonDrainBlocked: the drain cannot progress: a PodDisruptionBudget
	// allows no disruption, a pod opted out of disruption, a pod has no
	// controller, or another owner holds the cordon. The message names them.
	ReasonDrainBlocked = "DrainBlocked"
	// ReasonUpgrading: the upgrader pod runs the kubeadm plan on the node.
	ReasonUpgrading = "Upgrading"
	// ReasonWaitingForKubelet: the plan finished; the kubelet does not
	// report the desired version yet.
	ReasonWaitingForKubelet = "WaitingForKubelet"
	// ReasonSucceeded: the kubelet reports the desired version and the node
	// is uncordoned (unless someone else had cordoned it).
	ReasonSucceeded = "Succeeded"
	// ReasonFailed: the update failed; the message starts with one of the
	// Failure* reasons.
	ReasonFailed = "Failed"
	// ReasonGateClosed: a gate (UpdaterOptions.Gates) answered Wait before the update
	// started; nothing was done to the node. The message names the gate
	// and why.
	ReasonGateClosed = "GateClosed"
)

// Failure reasons: the "reason" label of MetricFailures, and the first word
// of a Failure answer's message and of the Failed condition's message.
const (
	// FailureInvalidMachine: the desired Machine lacks spec.providerID,
	// spec.version or spec.clusterName, or its version does not parse.
	FailureInvalidMachine = "InvalidMachine"
	// FailurePlanRejected: no kubeadm plan goes from the node's version to
	// the desired one (a skipped minor, a downgrade).
	FailurePlanRejected = "PlanRejected"
	// FailurePodBuild: the upgrader pod cannot be built from the options.
	FailurePodBuild = "PodBuild"
	// FailurePodRejected: the API server refuses the upgrader pod
	// (Pod Security admission, a policy webhook, an invalid field). It is
	// found with a server-side dry run before the node is cordoned, so the
	// node is left as it was.
	FailurePodRejected = "PodRejected"
	// FailureNodeGone: no Node has the machine's spec.providerID, and none
	// came back within UpdaterOptions.NodeGoneGrace.
	FailureNodeGone = "NodeGone"
	// FailureAmbiguousNode: two or more Nodes have the machine's
	// spec.providerID; updating one could update the wrong machine.
	FailureAmbiguousNode = "AmbiguousNode"
	// FailureNodeClaimed: the node's update record names another Machine
	// (two Machines with one providerID); the first one keeps the node.
	FailureNodeClaimed = "NodeClaimed"
	// FailureUpdateTimeout: the update was not done within
	// UpdaterOptions.UpdateTimeout of its start; it goes on, and a later call answers
	// done if it finishes.
	FailureUpdateTimeout = "UpdateTimeout"
	// FailureNodeNotReady: the node stayed NotReady during its update
	// longer than UpdaterOptions.NotReadyTimeout (a kubelet that does not come back
	// starts no further step).
	FailureNodeNotReady = "NodeNotReady"
	// FailureRequestMismatch: the request does not match the live objects
	// in the management cluster (UpdaterOptions.ManagementReader): no such Machine,
	// not marked by Cluster API for the update, another cluster,
	// providerID, version, role, bootstrap config or infrastructure
	// machine. The answer's message is the same for all; the log says
	// which.
	FailureRequestMismatch = "RequestMismatch"
	// FailureForeignPod: a pod with the upgrader pod's name in the
	// upgrader namespace runs another image, command, arguments or
	// security context than the update's pod: it is not the updater's,
	// and its status is not trusted. Delete it to go on.
	FailureForeignPod = "ForeignPod"
	// FailureStepFailed: a step of the upgrader pod failed.
	FailureStepFailed = "StepFailed"
	// FailureDrainTimeout: the drain did not finish before the drain
	// deadline (UpdaterOptions.DrainTimeout).
	FailureDrainTimeout = "DrainTimeout"
	// FailureGateStopped: a gate (UpdaterOptions.Gates) answered Stop before the
	// update started; nothing was done to the node.
	FailureGateStopped = "GateStopped"
	// FailureWorkloadUnreachable: the workload cluster could not be reached
	// (no client: its kubeconfig secret unreadable, or its API server not
	// answering the node lookup) for longer than
	// UpdaterOptions.WorkloadUnreachableTimeout, counted in the management cluster.
	// Cluster API keeps asking: a later call that reaches the cluster goes
	// on with the update.
	FailureWorkloadUnreachable = "WorkloadUnreachable"
	// FailureImagePull: the upgrader image cannot be pulled or started on
	// the node: its pre-pull pod (UpdaterOptions.PrePullTimeout) kept failing to pull
	// it (ErrImagePull, ImagePullBackOff) past the pre-pull timeout, its
	// reference is invalid (InvalidImageName), or its command failed. The
	// message names the kubelet's reason and message. It is found before
	// the node is cordoned, so the node is left as it was.
	FailureImagePull = "ImagePull"
)

// Reasons of the Kubernetes Events MachineUpdater records on the Machine
// (in the management cluster). Stable, like the condition reasons.
const (
	// EventReasonUpdateStarted (Normal): an in-place update of the
	// machine's node started.
	EventReasonUpdateStarted = "InPlaceUpdateStarted"
	// EventReasonNodeDrained (Normal): the node is cordoned and drained.
	EventReasonNodeDrained = "NodeDrained"
	// EventReasonDrainBlocked (Warning): the drain stopped progressing; the
	// note names the PodDisruptionBudgets and pods in the way.
	EventReasonDrainBlocked = "NodeDrainBlocked"
	// EventReasonUpdateSucceeded (Normal): the kubelet reports the desired
	// version; the note says how long the update took.
	EventReasonUpdateSucceeded = "InPlaceUpdateSucceeded"
	// EventReasonUpdateFailed (Warning): the update failed; the note starts
	// with a Failure* reason.
	EventReasonUpdateFailed = "InPlaceUpdateFailed"
	// EventReasonUpdateRetried (Normal): a failed update starts a new
	// attempt because the Machine's AnnotationRetry changed.
	EventReasonUpdateRetried = "InPlaceUpdateRetried"
)

// Values of the "outcome" label of MetricDecisions.
const (
	// HookAccept: CanUpdate* answered that the change can be applied in
	// place (patches returned), or that there is nothing to change.
	HookAccept = "accept"
	// HookDecline: CanUpdate* declined; Cluster API rolls the machine.
	HookDecline = "decline"
	// HookError: the request could not be answered (Failure response).
	HookError = "error"
)

// Names of the metrics registered by NewMetrics.
const (
	// MetricDecisions counts CanUpdateMachine and CanUpdateMachineSet
	// answers, by "hook" and "outcome" (HookAccept, HookDecline, HookError).
	MetricDecisions = "upgradekit_inplace_decisions_total"
	// MetricMachinesInProgress is, per "phase" (a Reason* constant but
	// ReasonSucceeded), the number of machines whose last UpdateMachine
	// answer from this process was in that phase, forgetting machines not
	// asked about for a while (MetricsOptions.StaleAfter). See Metrics for what that
	// means with several replicas.
	MetricMachinesInProgress = "upgradekit_inplace_machines_in_progress"
	// MetricFailures counts in-place updates that entered a failure, by
	// "reason" (a Failure* constant).
	MetricFailures = "upgradekit_inplace_update_failures_total"
	// MetricUpdateDuration is the time from an update's start, as recorded
	// on the Node (AnnotationInPlaceUpdate), to the answer "done".
	MetricUpdateDuration = "upgradekit_inplace_update_duration_seconds"
	// MetricHookDuration is how long the extension took to answer one
	// hook call (CanUpdateMachine, CanUpdateMachineSet, UpdateMachine), by
	// "hook": from the decoded request to the response, the management
	// and workload cluster reads included. Cluster API gives each call
	// the handler's TimeoutSeconds.
	MetricHookDuration = "upgradekit_inplace_hook_duration_seconds"
)

// AnnotationInPlaceUpdate is the Node annotation in which MachineUpdater
// keeps an UpdateRecord, as JSON, while it updates the node. It is how a
// restarted extension (or another replica) keeps the drain deadline and
// the update's start time; it is removed when the update is done.
const AnnotationInPlaceUpdate = "upgradekit.io/in-place-update"

// UpdateRecord is the state of one in-place update kept on the Node.
type UpdateRecord struct {
	// Machine is the Machine's namespace/name.
	Machine string `json:"machine"`
	// Version is the Kubernetes version the update goes to; a record for
	// another version is replaced (a new update).
	Version string `json:"version"`
	// Started is when the update started.
	Started metav1.Time `json:"started"`
	// PrePullStarted is when the pre-pull pod (UpdaterOptions.PrePullTimeout) was
	// first created; the pre-pull timeout counts from here.
	PrePullStarted *metav1.Time `json:"prePullStarted,omitempty"`
	// PrePulled is when the pre-pull pod was seen Succeeded: the upgrader
	// image runs on the node, and the drain may start.
	PrePulled *metav1.Time `json:"prePulled,omitempty"`
	// DrainStarted is when draining started; the drain deadline counts
	// from here.
	DrainStarted *metav1.Time `json:"drainStarted,omitempty"`
	// Drained is when the drain finished; the upgrader pod starts after.
	Drained *metav1.Time `json:"drained,omitempty"`
	// Role is the kubeadm role (kubeadm.Role) chosen when the update
	// started, kept for the whole update: `kubeadm upgrade apply` raises
	// kubeadm-config's kubernetesVersion while the first control plane's
	// upgrader pod still has steps to run, after which the role would read
	// differently and name another plan, and so another pod.
	Role string `json:"role,omitempty"`
	// Pod is the upgrader pod of this update, namespace/name, recorded
	// before the pod is created. Every other upgrader pod on the node
	// belongs to an abandoned plan.
	Pod string `json:"pod,omitempty"`
	// FromVersion is the kubelet version the plan of Pod was built from;
	// the plan is rebuilt from it while Pod exists, so that it stays the
	// same plan.
	FromVersion string `json:"fromVersion,omitempty"`
	// Succeeded is when the update's own upgrader pod (Pod) was seen
	// Succeeded: its verify step checked the node. MachineUpdater answers
	// done only with it, so a pod deleted before its success was seen is
	// created again (it resumes from the journal on the host) rather than
	// taken for done. Records without it (older versions of this updater
	// wrote none) are proven the same way.
	Succeeded *metav1.Time `json:"succeeded,omitempty"`
	// Reported is the failure or blocked drain last recorded as an Event
	// (and, for a failure, in MetricFailures): "Failed/" and a Failure*
	// reason, or ReasonDrainBlocked; empty once the update goes on. A
	// repeat is not recorded again, whether or not the Node condition
	// could be written. It is written with a compare-and-swap of this
	// annotation, so two replicas do not both record the same transition.
	Reported string `json:"reported,omitempty"`
	// KubeletArgs is the digest of the desired kubelet extra arguments
	// this update applies with its plan ("" when the request carried no
	// KubeadmConfig); once the update is done it is kept on the Node as
	// AnnotationKubeletArgs. Other desired arguments are another update.
	KubeletArgs string `json:"kubeletArgs,omitempty"`
	// ControlPlaneConfig is the digest of the desired control plane
	// configuration (static pod extraArgs, etcd image) this update applies
	// and verifies on a control plane node ("" otherwise); once the update
	// is done it is kept on the Node as AnnotationControlPlaneConfig.
	ControlPlaneConfig string `json:"controlPlaneConfig,omitempty"`
	// Files are the digests of the desired KubeadmConfig files, one per
	// file, comma-separated ("" for none); this update writes and verifies
	// those the Node's AnnotationFiles does not list, and once it is done
	// they are kept there.
	Files string `json:"files,omitempty"`
	// Attempt counts the retries of this update asked for with
	// AnnotationRetry (0: the first attempt). Each attempt runs its plan
	// under its own name, so with a journal of its own on the host.
	Attempt int `json:"attempt,omitempty"`
	// RetryToken is the value of the Machine's AnnotationRetry that the
	// last retry (or, without one, the start of the update) consumed; a
	// different value asks for a new attempt.
	RetryToken string `json:"retryToken,omitempty"`
}

// ErrMetricsRegistration is matched by NewMetrics' errors: a collector of
// another type or shape is already registered under one of the names.
var ErrMetricsRegistration = errors.New("cannot register upgradekit metrics")

// inProgressPhases are the phases MetricMachinesInProgress always reports,
// zeros included, so dashboards see every series from the start.
var inProgressPhases = []string{ReasonPending, ReasonDraining, ReasonDrainBlocked, ReasonUpgrading, ReasonWaitingForKubelet, ReasonFailed}

// Metrics are the Prometheus metrics of Extension (ExtensionOptions.Metrics) and
// MachineUpdater (UpdaterOptions.Metrics). A nil *Metrics records nothing.
//
// Counters and the histogram are exact per process. The in-progress gauge
// is what this process last answered for each machine: Cluster API sends
// each call to any replica behind the extension's Service, so with several
// replicas each one reports the machines it happened to answer, a machine
// may be counted by more than one replica, and a machine whose update ended
// on another replica lingers here until MetricsOptions.StaleAfter forgets it. Use
// max() over replicas as a rough signal, or, for an exact count, the Nodes'
// ConditionInPlaceUpdate (kube-state-metrics exports every node condition
// as kube_node_status_condition).
type Metrics struct {
	decisions *prometheus.CounterVec
	failures  *prometheus.CounterVec
	duration  prometheus.Histogram
	hooks     *prometheus.HistogramVec
	progress  *progressCollector
}

// MetricsOptions configure NewMetrics. The zero value of every field is
// its default.
type MetricsOptions struct {
	// StaleAfter is how long a machine counts in MetricMachinesInProgress
	// after its last UpdateMachine call (default 15 minutes: longer than
	// any RetryAfterSeconds and than Cluster API's backoff after a few
	// failures; must not be negative).
	StaleAfter time.Duration
	// Clock ages the in-progress entries (default: the real clock; tests
	// use a fake one).
	Clock clock.PassiveClock
}

// NewMetrics creates the metrics and registers them on reg; a nil reg
// means controller-runtime's registry (sigs.k8s.io/controller-runtime/pkg/metrics.Registry),
// which a manager's metrics server serves. Calling it again with the same
// registry reuses the collectors already registered (opts of the later
// call are then ignored) instead of failing; a different collector under
// one of the names is an error matching ErrMetricsRegistration.
func NewMetrics(reg prometheus.Registerer, opts MetricsOptions) (*Metrics, error) {
	o := opts
	switch {
	case o.StaleAfter < 0:
		return nil, &OptionError{Option: "MetricsOptions.StaleAfter", Detail: fmt.Sprintf("%s: must not be negative", o.StaleAfter)}
	case o.StaleAfter == 0:
		o.StaleAfter = 15 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDecisions,
			Help: "CanUpdateMachine and CanUpdateMachineSet answers, by hook and outcome (accept, decline, error).",
		}, []string{"hook", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricFailures,
			Help: "In-place updates that entered a failure, by reason.",
		}, []string{"reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricUpdateDuration,
			Help:    "Seconds from the start of an in-place update, as recorded on the Node, to done.",
			Buckets: []float64{30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200},
		}),
		hooks: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricHookDuration,
			Help:    "Seconds the extension took to answer one hook call, by hook.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"hook"}),
		progress: &progressCollector{
			desc: prometheus.NewDesc(MetricMachinesInProgress,
				"Machines whose last UpdateMachine answer from this process was in progress, by phase.", []string{"phase"}, nil),
			seen:       map[string]progressEntry{},
			staleAfter: o.StaleAfter,
			clock:      o.Clock,
		},
	}
	if err := register(reg, &m.decisions); err != nil {
		return nil, err
	}
	if err := register(reg, &m.failures); err != nil {
		return nil, err
	}
	if err := register(reg, &m.duration); err != nil {
		return nil, err
	}
	if err := register(reg, &m.hooks); err != nil {
		return nil, err
	}
	if err := register(reg, &m.progress); err != nil {
		return nil, err
	}
	for _, h := range []string{"CanUpdateMachine", "CanUpdateMachineSet", "UpdateMachine"} {
		m.hooks.WithLabelValues(h)
	}
	// Every series exists from the start, at zero.
	for _, h := range []string{"CanUpdateMachine", "CanUpdateMachineSet"} {
		for _, out := range []string{HookAccept, HookDecline, HookError} {
			m.decisions.WithLabelValues(h, out)
		}
	}
	for _, r := range []string{FailureInvalidMachine, FailurePlanRejected, FailurePodBuild, FailurePodRejected, FailureNodeGone,
		FailureAmbiguousNode, FailureNodeClaimed, FailureUpdateTimeout, FailureNodeNotReady, FailureRequestMismatch, FailureStepFailed, FailureDrainTimeout} {
		m.failures.WithLabelValues(r)
	}
	return m, nil
}

// register registers *c, or replaces it with the collector of the same
// type already registered under its descriptors.
func register[T prometheus.Collector](reg prometheus.Registerer, c *T) error {
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			*c = existing
			return nil
		}
	}
	return fmt.Errorf("%w: %w", ErrMetricsRegistration, err)
}

func (m *Metrics) decision(hook, outcome string) {
	if m != nil {
		m.decisions.WithLabelValues(hook, outcome).Inc()
	}
}

func (m *Metrics) failure(reason string) {
	if m != nil {
		m.failures.WithLabelValues(reason).Inc()
	}
}

// hookDone observes one hook call that started at start.
func (m *Metrics) hookDone(hook string, start time.Time) {
	if m != nil {
		m.hooks.WithLabelValues(hook).Observe(time.Since(start).Seconds())
	}
}

func (m *Metrics) updateDuration(d time.Duration) {
	if m != nil && d >= 0 {
		m.duration.Observe(d.Seconds())
	}
}

func (m *Metrics) track(machine, phase string) {
	if m != nil {
		m.progress.set(machine, phase)
	}
}

func (m *Metrics) untrack(machine string) {
	if m != nil {
		m.progress.remove(machine)
	}
}

type progressEntry struct {
	phase string
	seen  time.Time
}

// progressCollector computes MetricMachinesInProgress when scraped, from
// the last phase answered per machine, forgetting stale entries.
type progressCollector struct {
	desc       *prometheus.Desc
	mu         sync.Mutex
	seen       map[string]progressEntry
	staleAfter time.Duration
	clock      clock.PassiveClock
}

func (p *progressCollector) set(machine, phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[machine] = progressEntry{phase: phase, seen: p.clock.Now()}
}

func (p *progressCollector) remove(machine string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.seen, machine)
}

// Describe implements prometheus.Collector.
func (p *progressCollector) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

// Collect implements prometheus.Collector.
func (p *progressCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	p.mu.Lock()
	now := p.clock.Now()
	for k, e := range p.seen {
		if now.Sub(e.seen) > p.staleAfter {
			delete(p.seen, k)
			continue
		}
		counts[e.phase]++
	}
	p.mu.Unlock()
	for _, phase := range inProgressPhases {
		if m, err := prometheus.NewConstMetric(p.desc, prometheus.GaugeValue, float64(counts[phase]), phase); err == nil {
			ch <- m
		}
	}
}

// InPlaceUpdateCondition returns the node's ConditionInPlaceUpdate, or nil.
func InPlaceUpdateCondition(n *corev1.Node) *corev1.NodeCondition {
	if n == nil {
		return nil
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == ConditionInPlaceUpdate {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// conditionStatus is True while an update is under way.
func conditionStatus(reason string) corev1.ConditionStatus {
	if reason == ReasonSucceeded || reason == ReasonFailed {
		return corev1.ConditionFalse
	}
	return corev1.ConditionTrue
}

// maxConditionMessage keeps condition messages readable in kubectl.
const maxConditionMessage = 1024

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// patchCondition writes cond on the node's status with a strategic merge
// patch keyed by condition type: it touches only that condition, carries
// no resourceVersion (so it cannot conflict with the kubelet's own status
// patches) and leaves every other condition as the kubelet wrote it.
func patchCondition(ctx context.Context, c client.Client, node *corev1.Node, cond corev1.NodeCondition) error {
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
	return c.Status().Patch(ctx, n, client.RawPatch(types.StrategicMergePatchType, data))
}

// readUpdateRecord returns the node's UpdateRecord, nil when there is none
// or when the annotation does not hold one (it is then overwritten).
func readUpdateRecord(n *corev1.Node) (*UpdateRecord, error) {
	raw, ok := n.Annotations[AnnotationInPlaceUpdate]
	if !ok {
		return nil, nil
	}
	var r UpdateRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil || r.Version == "" {
		return nil, fmt.Errorf("node %s: annotation %s is not an update record: %q", n.Name, AnnotationInPlaceUpdate, raw)
	}
	return &r, nil
}

// encodeUpdateRecord returns the annotation value of r.
func encodeUpdateRecord(r *UpdateRecord) (string, error) {
	b, err := json.Marshal(r)
	return string(b), err
}

// writeUpdateRecord sets (or, with nil, removes) the node's UpdateRecord
// with a JSON merge patch of that one annotation. It returns the value
// written ("" when removed).
func writeUpdateRecord(ctx context.Context, c client.Client, node string, r *UpdateRecord) (string, error) {
	var v any // null removes the key
	raw := ""
	if r != nil {
		var err error
		if raw, err = encodeUpdateRecord(r); err != nil {
			return "", err
		}
		v = raw
	}
	return raw, patchNodeAnnotation(ctx, c, node, AnnotationInPlaceUpdate, v)
}

// swapUpdateRecord replaces the node's UpdateRecord with r only if the
// annotation still holds old: a JSON patch whose "test" operation makes the
// API server refuse it when another writer (a replica, a later call) got
// there first. Unlike a resourceVersion precondition it does not fail on
// the kubelet's own writes to the Node.
func swapUpdateRecord(ctx context.Context, c client.Client, node, old string, r *UpdateRecord) (string, error) {
	raw, err := encodeUpdateRecord(r)
	if err != nil {
		return "", err
	}
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(AnnotationInPlaceUpdate)
	data, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": old},
		{"op": "replace", "path": path, "value": raw},
	})
	if err != nil {
		return "", err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return raw, c.Patch(ctx, n, client.RawPatch(types.JSONPatchType, data))
}
