package capi

import (
	"fmt"
	"math"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// UpdaterOptions configure NewMachineUpdater. The zero value of every field
// is its default; for the deadlines, a negative value means no deadline.
// Draining is on by default, so Clientset is required unless SkipDrain,
// and PodOptions must name an image (nodepod.WithImage) unless Images
// does.
type UpdaterOptions struct {
	// Clientset reaches the workload cluster's API for cordon, drain and
	// uncordon (workload.KubeconfigClientset builds one). Draining is on by
	// default and needs it; see SkipDrain.
	Clientset workload.Clientset

	// SkipDrain updates nodes without cordoning and draining them first,
	// which is what Cluster API and EKS Anywhere do for in-place updates:
	// the node keeps its pods while kubeadm, the kubelet and containerd
	// restart under them. Prefer draining unless the node's workloads
	// tolerate that (or the cluster has a single node whose pods cannot go
	// anywhere). Default false: drain.
	SkipDrain bool

	// DrainTimeout is how long a drain may stay unfinished before
	// UpdateMachine answers Failure naming what blocks it (default
	// DefaultDrainTimeout; negative: no deadline). The deadline counts from
	// the drain's start as recorded on the Node (observe.AnnotationInPlaceUpdate),
	// so a restarted extension keeps it. After the deadline the node stays
	// cordoned and each call still tries to evict: once the blocking
	// PodDisruptionBudget allows it, the update carries on by itself.
	DrainTimeout time.Duration

	// DrainAttempt bounds the eviction work of one UpdateMachine call
	// (default DefaultDrainAttempt; must not be negative). Keep it well
	// below the hook's timeoutSeconds in the ExtensionConfig (10 seconds by
	// default).
	DrainAttempt time.Duration

	// DrainOptions are passed to drain.Drain (grace period, force, opt-out
	// annotations, pod selector, eviction retry delay; default retry delay
	// here is 1 second). drain.WithTimeout, drain.WithSkip and
	// drain.WithSkipNamespace (our upgrader pods, in our namespace only)
	// are set by MachineUpdater (DrainAttempt, and nodepod.Selector() so
	// the upgrader pod is never evicted) and cannot be overridden; so is
	// drain.WithClusterAPIRules: the drain follows Cluster API's own drain
	// rules for the Machine (the pod label cluster.x-k8s.io/drain, the
	// MachineDrainRules of the Machine's namespace read through
	// ManagementReader, pods without a controller evicted with a warning),
	// which implies drain.WithForce. Default none.
	DrainOptions []drain.Option

	// CordonOwner is the owner recorded on cordons (default
	// DefaultCordonOwner). Use a distinct owner per extension if several
	// extensions update the same workload clusters.
	CordonOwner string

	// SkipPrePull drains the node without first proving that the upgrader
	// image can be pulled and started on it. Then an image that cannot be
	// pulled shows only once the node is drained, as an upgrader pod in
	// ImagePullBackOff, until the update deadline (UpdateTimeout). Default
	// false: pre-pull.
	//
	// The pre-pull runs when the updater drains (see SkipDrain), after the
	// upgrader pod's server-side dry run and before the cordon:
	// nodepod.BuildPrePull's pod, with the upgrader pod's image (the target
	// version's, Images), pull policy, pull secrets, namespace, tolerations
	// and priority class, pinned to the node, running the image's runner
	// binary's "version" command (or "nsenter --version" without a runner
	// command). UpdateMachine answers in progress (observe.ReasonPending, naming
	// the image and the kubelet's reason) while it runs, deletes it once it
	// Succeeded, records that on the Node (observe.UpdateRecord.PrePulled) and goes
	// on with the cordon in the same call. It needs the same pod verbs
	// (create, get, list, delete) as the upgrader pod, in the same
	// namespace.
	SkipPrePull bool

	// PrePullTimeout is how long the pre-pull pod may keep failing to pull
	// the upgrader image before UpdateMachine answers Failure
	// (observe.FailureImagePull) on the undrained node (default
	// DefaultPrePullTimeout; must not be negative: SkipPrePull turns the
	// pre-pull off). It counts from the pre-pull pod's creation, recorded
	// on the Node (observe.UpdateRecord.PrePullStarted), so a restarted extension
	// keeps it. A pod that has not started pulling yet (its kubelet is
	// down, say) is not counted against it: the update and NotReady
	// deadlines bound that.
	PrePullTimeout time.Duration

	// PodOptions are passed to the upgrader pod builder (image, mode,
	// runner command, tolerations...). nodepod.WithImage is required
	// unless Images is set. Default none.
	PodOptions []nodepod.Option

	// Images runs each update's upgrader pod with the image of its target
	// version (the bundle that carries that version's binaries), over any
	// nodepod.WithImage in PodOptions. A version without an image is a
	// Failure (observe.FailurePodBuild) found before the node is disrupted; give
	// the same map to the Extension (ExtensionOptions.Images) so that such
	// a version is answered with a Failure before Cluster API commits to
	// it. NewMachineUpdater fails on an invalid map. Default nil: the image
	// of PodOptions for every version.
	Images ImagesByVersion

	// PlanConfig lets the caller adjust each kubeadm plan's configuration
	// (staging paths, skipped components) before it is built. Default nil.
	PlanConfig func(*kubeadm.Config)

	// RetryAfter is the RetryAfterSeconds answered while an update runs, in
	// whole seconds, at least one (default 15 seconds).
	RetryAfter time.Duration

	// Logger is the logger (default: the request context's). Transitions
	// (started, drained, succeeded, failed) log at V(0), every in-progress
	// answer at V(1).
	Logger logr.Logger

	// EventRecorder records Kubernetes Events on the Machine, in the
	// management cluster, with the EventReason* reasons (default none).
	// With ManagementReader, a failure (observe.EventReasonUpdateFailed, recorded
	// once per failure like the Machine's) is also recorded on the
	// Machine's owner, the object `kubectl describe` is run on when a
	// rollout stops: its MachineDeployment (read through its MachineSet:
	// get on MachineSets), or its KubeadmControlPlane, with the Machine as
	// the related object. Cluster API v1.14 puts only a fixed text on the
	// Machine's Updating condition. A controller-runtime manager hands a
	// recorder out with mgr.GetEventRecorder(name); without a manager use
	// k8s.io/client-go/tools/events.NewBroadcaster. The recorder's scheme
	// needs no CAPI types: the Machine carries its kind, the owner is an
	// object reference.
	EventRecorder events.EventRecorder

	// Metrics records the UpdateMachine metrics (machines in progress,
	// failures, time per machine). Default nil: none.
	Metrics *Metrics

	// Clock is the clock for update and drain start times and the
	// deadlines (default: the real clock; tests use a fake one).
	Clock clock.PassiveClock

	// Gates are asked before an update starts, before anything is done to
	// the node: Wait answers in progress (observe.ReasonGateClosed, the gate's
	// reason, RetryAfterSeconds the gate's RetryAfter, at most
	// maxGateRetryAfter, at least RetryAfter), so Cluster API asks again
	// and nothing changes until the gate opens; Stop answers Failure
	// (observe.FailureGateStopped). An update that has started is not interrupted
	// by a gate that closes. A nil gate is refused. Default none.
	Gates []strategy.Gate

	// NodeGoneGrace is how long a machine's Node may be missing (no Node
	// with its spec.providerID) before UpdateMachine answers Failure
	// (observe.FailureNodeGone) instead of waiting (default DefaultNodeGoneGrace;
	// negative: wait for ever). The time counts from the first call that
	// found no Node, recorded in nodeGoneConfigMap in the workload cluster
	// so that a restarted extension keeps it (the Node, which holds every
	// other piece of the update's state, is what is missing).
	NodeGoneGrace time.Duration

	// ManagementReader checks every UpdateMachine request against the
	// management cluster before acting on it, through it (a manager's cached
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
	// A request that does not match is a Failure (observe.FailureRequestMismatch)
	// whose message is the same whatever the mismatch, and names nothing of
	// the live objects (whether a Machine exists, its providerID or version):
	// the details go to the log. Nothing is done, recorded or remembered for
	// it: no Event, no metric, no failure kept in memory. It needs get on
	// Machines, KubeadmConfigs and the infrastructure machines' kinds, get on
	// MachineSets to record a failure on the MachineDeployment
	// (EventRecorder), and,
	// when draining, list on MachineDrainRules and get on Clusters (the drain
	// follows Cluster API's drain rules for the Machine; the Cluster is read
	// only when a rule has a clusterSelector).
	//
	// When it can also write (a client.Client, as a manager's is), a
	// control plane's update to a new version ends by removing
	// KubeadmControlPlane's certificate expiry annotation from the Machine's
	// KubeadmConfig, since kubeadm upgrade renewed the certificates it dates
	// (see forgetCertificatesExpiry); that needs patch on KubeadmConfigs.
	//
	// Default nil: the request's Machine is used as sent; that is for
	// tests and for callers that check requests themselves: anyone who can
	// reach the hook could then drive the update.
	ManagementReader client.Reader

	// UpdateTimeout is how long an update may go on, counted from its
	// start recorded on the Node, before an answer that would say "still
	// working" says Failure (observe.FailureUpdateTimeout) instead (default
	// DefaultUpdateTimeout; negative: no deadline). Nothing is interrupted:
	// if the update finishes later, the next call answers done.
	UpdateTimeout time.Duration

	// WorkloadUnreachableTimeout is how long UpdateMachine may go on
	// answering "in progress" while it cannot reach the machine's workload
	// cluster: no client (its kubeconfig secret cannot be read, is missing
	// or holds no kubeconfig) or no answer from its API server to the node
	// lookup. Past it, it answers Failure (observe.FailureWorkloadUnreachable) with
	// the last error, which names the secret or the server (default
	// DefaultWorkloadUnreachableTimeout; negative: no deadline).
	//
	// UpdateTimeout and NotReadyTimeout count from times recorded on the
	// Node, which an unreachable cluster does not show; this deadline is
	// counted from the management side instead: from the first call of
	// this process that found the cluster unreachable since it last
	// reached it, and never from before Cluster API started the update
	// (the live Machine's Updating condition turning True, with
	// ManagementReader), so a failure left over from an earlier update
	// does not count. A call that reaches the cluster resets it. A
	// restarted extension counts afresh, so the Failure comes at most this
	// long after the restart; it is not terminal either: Cluster API keeps
	// calling, and the first call that reaches the cluster goes on with
	// the update.
	WorkloadUnreachableTimeout time.Duration

	// NotReadyTimeout is how long the node's Ready condition may stay False
	// or Unknown while its update is under way (the kubelet restart makes
	// it NotReady for seconds) before an answer that would say "still
	// working" says Failure (observe.FailureNodeNotReady) instead (default
	// DefaultNotReadyTimeout; negative: no deadline). A kubelet that does
	// not come back starts no further step, so waiting longer would wait
	// for ever.
	NotReadyTimeout time.Duration
}

// defaultRetryAfter is UpdaterOptions.RetryAfter's default.
const defaultRetryAfter = 15 * time.Second

// OptionError is a constructor's error about one of its options: one
// field of UpdaterOptions, ExtensionOptions or MetricsOptions, or of
// extensionserver.Options. It matches ErrInvalidOption, and Err too when
// there is one.
type OptionError struct {
	// Option names the field, with its struct: "UpdaterOptions.RetryAfter",
	// "Options.SkipSteps".
	Option string
	// Detail says what is wrong, starting with the offending value where
	// there is one.
	Detail string
	// Err is the underlying error, if any.
	Err error
}

// Error names the option and says what is wrong with it.
func (e *OptionError) Error() string {
	msg := ErrInvalidOption.Error() + ": " + e.Option
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + errtext.Cap(e.Err.Error())
	}
	return msg
}

// Unwrap gives ErrInvalidOption and Err.
func (e *OptionError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidOption}
	}
	return []error{ErrInvalidOption, e.Err}
}

// optionInvalid is NewMachineUpdater's error about one UpdaterOptions
// field.
func optionInvalid(field, format string, args ...any) error {
	return &OptionError{Option: "UpdaterOptions." + field, Detail: fmt.Sprintf(format, args...)}
}

// orDeadline gives a deadline's value: def for 0, 0 (none) for a negative
// value.
func orDeadline(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// newMachineUpdater applies o, with its defaults, to a new MachineUpdater
// and checks it.
func newMachineUpdater(workload workload.Client, o UpdaterOptions) (*MachineUpdater, error) {
	if workload == nil {
		return nil, &OptionError{Option: "NewMachineUpdater", Detail: "nil workload client getter"}
	}
	u := &MachineUpdater{
		workload: workload, clientset: o.Clientset,
		podOpts: append([]nodepod.Option(nil), o.PodOptions...), planHook: o.PlanConfig,
		log: o.Logger, drain: !o.SkipDrain, prePull: !o.SkipPrePull,
		prePullTO: o.PrePullTimeout, drainTimeout: orDeadline(o.DrainTimeout, DefaultDrainTimeout), drainAttempt: o.DrainAttempt,
		drainOpts: append([]drain.Option(nil), o.DrainOptions...), cordonOwner: o.CordonOwner,
		recorder: o.EventRecorder, metrics: o.Metrics, clock: o.Clock,
		gates: append([]strategy.Gate(nil), o.Gates...), lastFailure: map[string]string{},
		nodeNames: map[string]string{}, missingSince: map[string]time.Time{}, goneChecked: map[string]bool{},
		nodeGoneGrace: orDeadline(o.NodeGoneGrace, DefaultNodeGoneGrace),
		images:        o.Images,
		updateTimeout: orDeadline(o.UpdateTimeout, DefaultUpdateTimeout), notReadyTimeout: orDeadline(o.NotReadyTimeout, DefaultNotReadyTimeout),
		mgmt:             o.ManagementReader,
		unreachableSince: map[string]time.Time{}, unreachableTimeout: orDeadline(o.WorkloadUnreachableTimeout, DefaultWorkloadUnreachableTimeout),
	}
	retry := o.RetryAfter
	switch {
	case retry == 0:
		retry = defaultRetryAfter
	case retry < time.Second || retry > math.MaxInt32*time.Second:
		return nil, optionInvalid("RetryAfter", "%s: must be at least 1s", retry)
	case retry%time.Second != 0:
		return nil, optionInvalid("RetryAfter", "%s: must be whole seconds", retry)
	}
	u.retryAfter = int32(retry / time.Second)
	if u.prePullTO == 0 {
		u.prePullTO = DefaultPrePullTimeout
	}
	if u.drainAttempt == 0 {
		u.drainAttempt = DefaultDrainAttempt
	}
	if u.cordonOwner == "" {
		u.cordonOwner = DefaultCordonOwner
	}
	if u.clock == nil {
		u.clock = clock.RealClock{}
	}
	switch {
	case u.drain && u.clientset == nil:
		return nil, optionInvalid("Clientset", "draining (on by default) needs it; set SkipDrain to update nodes without draining them")
	case u.drainAttempt < 0:
		return nil, optionInvalid("DrainAttempt", "%s: must not be negative", u.drainAttempt)
	case u.prePullTO < 0:
		return nil, optionInvalid("PrePullTimeout", "%s: must not be negative (SkipPrePull turns the pre-pull off)", u.prePullTO)
	}
	for i, g := range u.gates {
		if g == nil {
			return nil, optionInvalid("Gates", "gate %d is nil", i)
		}
	}
	switch len(u.gates) {
	case 0:
	case 1:
		u.gate = u.gates[0]
	default:
		u.gate = strategy.Gates(u.gates)
	}
	// The pod options are checked once here, on a one-step plan, so that a
	// pod that can never be built is refused at startup; the probe also
	// says which namespace the upgrader pods live in.
	probeOpts := u.podOpts
	if u.images != nil {
		if err := u.images.validate("UpdaterOptions.Images"); err != nil {
			return nil, err
		}
		img, _ := u.images.Image(u.images.versions()[0])
		probeOpts = append(append([]nodepod.Option(nil), u.podOpts...), nodepod.WithImage(img))
	}
	probe, err := nodepod.Build(nodeexec.Plan{Name: "probe", Node: "probe", Steps: []nodeexec.Step{{Name: "probe", Argv: []string{"true"}}}}, probeOpts...)
	if err != nil {
		return nil, &OptionError{Option: "UpdaterOptions.PodOptions", Detail: "upgrader pod", Err: err}
	}
	if u.drain && u.prePull {
		if _, err := nodepod.BuildPrePull("probe", probeOpts...); err != nil {
			return nil, &OptionError{Option: "UpdaterOptions.PodOptions", Detail: "pre-pull pod", Err: err}
		}
	}
	u.podNamespace = probe.Namespace
	return u, nil
}
