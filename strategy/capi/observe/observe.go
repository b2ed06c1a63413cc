package observe

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionInPlaceUpdate is the Node condition capi.MachineUpdater writes on the
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
	// ReasonGateClosed: a gate (capi.UpdaterOptions.Gates) answered Wait before the update
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
	// came back within capi.UpdaterOptions.NodeGoneGrace.
	FailureNodeGone = "NodeGone"
	// FailureAmbiguousNode: two or more Nodes have the machine's
	// spec.providerID; updating one could update the wrong machine.
	FailureAmbiguousNode = "AmbiguousNode"
	// FailureNodeClaimed: the node's update record names another Machine
	// (two Machines with one providerID); the first one keeps the node.
	FailureNodeClaimed = "NodeClaimed"
	// FailureUpdateTimeout: the update was not done within
	// capi.UpdaterOptions.UpdateTimeout of its start; it goes on, and a later call answers
	// done if it finishes.
	FailureUpdateTimeout = "UpdateTimeout"
	// FailureNodeNotReady: the node stayed NotReady during its update
	// longer than capi.UpdaterOptions.NotReadyTimeout (a kubelet that does not come back
	// starts no further step).
	FailureNodeNotReady = "NodeNotReady"
	// FailureRequestMismatch: the request does not match the live objects
	// in the management cluster (capi.UpdaterOptions.ManagementReader): no such Machine,
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
	// deadline (capi.UpdaterOptions.DrainTimeout).
	FailureDrainTimeout = "DrainTimeout"
	// FailureGateStopped: a gate (capi.UpdaterOptions.Gates) answered Stop before the
	// update started; nothing was done to the node.
	FailureGateStopped = "GateStopped"
	// FailureWorkloadUnreachable: the workload cluster could not be reached
	// (no client: its kubeconfig secret unreadable, or its API server not
	// answering the node lookup) for longer than
	// capi.UpdaterOptions.WorkloadUnreachableTimeout, counted in the management cluster.
	// Cluster API keeps asking: a later call that reaches the cluster goes
	// on with the update.
	FailureWorkloadUnreachable = "WorkloadUnreachable"
	// FailureImagePull: the upgrader image cannot be pulled or started on
	// the node: its pre-pull pod (capi.UpdaterOptions.PrePullTimeout) kept failing to pull
	// it (ErrImagePull, ImagePullBackOff) past the pre-pull timeout, its
	// reference is invalid (InvalidImageName), or its command failed. The
	// message names the kubelet's reason and message. It is found before
	// the node is cordoned, so the node is left as it was.
	FailureImagePull = "ImagePull"
)

// Reasons of the Kubernetes Events capi.MachineUpdater records on the Machine
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
	// attempt because the Machine's capi.AnnotationRetry changed.
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

// Names of the metrics registered by capi.NewMetrics.
const (
	// MetricDecisions counts CanUpdateMachine and CanUpdateMachineSet
	// answers, by "hook" and "outcome" (HookAccept, HookDecline, HookError).
	MetricDecisions = "upgradekit_inplace_decisions_total"
	// MetricMachinesInProgress is, per "phase" (a Reason* constant but
	// ReasonSucceeded), the number of machines whose last UpdateMachine
	// answer from this process was in that phase, forgetting machines not
	// asked about for a while (capi.MetricsOptions.StaleAfter). See capi.Metrics for what that
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

// AnnotationInPlaceUpdate is the Node annotation in which capi.MachineUpdater
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
	// PrePullStarted is when the pre-pull pod (capi.UpdaterOptions.PrePullTimeout) was
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
	// Succeeded: its verify step checked the node. capi.MachineUpdater answers
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
	// capi.AnnotationRetry (0: the first attempt). Each attempt runs its plan
	// under its own name, so with a journal of its own on the host.
	Attempt int `json:"attempt,omitempty"`
	// RetryToken is the value of the Machine's capi.AnnotationRetry that the
	// last retry (or, without one, the start of the update) consumed; a
	// different value asks for a new attempt.
	RetryToken string `json:"retryToken,omitempty"`
}

// EventReasonCanUpdateFailed (Warning) is the reason of the Event an
// capi.Extension with capi.ExtensionOptions.EventRecorder records on a
// MachineDeployment or KubeadmControlPlane when its CanUpdate* answer is a
// Failure; the note names the hook, the MachineSet or Machine asked about,
// and the error (an unknown setting names the setting).
const EventReasonCanUpdateFailed = "InPlaceUpdateCheckFailed"

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
