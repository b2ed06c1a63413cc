// Package strategy decides how each machine gets to its desired state: in
// place, by replacement, or not at all.
//
// This first part is the decision core. An Updater declares which changes
// (from package diff) it can apply in place, by category (ForCategories),
// by path pattern (ForPaths) or by any function (NewUpdater). Updaters
// composes several updaters behind one Decider, the way a single CAPI
// in-place extension can front a Kubernetes-version updater, a files
// updater and an etcd updater: each change goes to the first updater that
// covers it, and the machine is updated in place only when every change is
// covered. Otherwise the Decision says Replace and names the uncovered
// fields. Policy is the declarative form: ordered rules (category and/or
// path → InPlace, Replace or Ignore) with a default.
//
// A Decision carries the changes applied in place as a diff.ChangeSet, so
// its JSONPatch and MergePatch are what a CanUpdateMachine response needs.
//
// Extension answers Cluster API's CanUpdateMachine and CanUpdateMachineSet
// runtime hooks with any Decider, using CAPI's real hook types, and
// registers on sigs.k8s.io/cluster-api/exp/runtime/server. It diffs with
// diff.InPlaceUpdate (what CAPI re-compares after applying the patches), so
// an accepted answer leaves CAPI nothing to roll; it honours the
// ExtensionConfig settings SettingDisabled and SettingIgnore and rejects
// unknown ones.
//
// Strategies are values behind one interface, composed in an ordered list
// like Karpenter's disruption methods: InPlaceStrategy,
// RollingReplaceStrategy (maxSurge/maxUnavailable rounded like
// Kubernetes), ReplaceFirstStrategy, OnDeleteStrategy, FallbackStrategy (in
// place, else replace) and NeverReplaceStrategy (report Blocked instead).
// A Planner turns a Cluster (control plane, worker groups, per-machine
// changes, budgets with UTC cron windows) into an ordered Plan of batches:
// control plane first and one machine at a time, no version skew, no batch
// over maxUnavailable, maxSurge or a disruption budget, do-not-disrupt and
// PDB-blocked machines skipped with a reason, canary waves, a circuit
// breaker. Preview renders the plan as a value, JSON or a table before
// anything happens.
//
// MachineUpdater answers the UpdateMachine hook: it finds the Node through
// spec.providerID, upgrades it with a kubeadm plan run by an upgrader pod
// (package nodeexec), keeps all progress in the workload cluster (the pod,
// the Node) so a restarted extension carries on, never runs two upgrader
// pods on one node, and answers done only when the kubelet reports the
// desired version and the upgrader pod has succeeded.
//
// # Drain before in-place
//
// Cluster API does not drain a machine it updates in place, and EKS
// Anywhere does not either: pods keep running while kubeadm, containerd and
// the kubelet restart under them. MachineUpdater drains by default
// (WithoutDrain turns it off): it cordons the node as DefaultCordonOwner,
// evicts pods through the Eviction API so PodDisruptionBudgets hold
// (package nodeexec/drain; DaemonSet, mirror and upgrader pods stay), and
// starts the upgrader pod only once the node is empty. Because
// UpdateMachine is a polling hook, each call does a bounded attempt
// (WithDrainAttempt) and answers RetryAfterSeconds naming the budgets and
// pods still in the way. The drain's start is kept on the Node
// (AnnotationInPlaceUpdate), so the deadline (WithDrainTimeout) survives a
// restart; past it the answer is Failure (FailureDrainTimeout) naming the
// budgets, the node stays cordoned and later calls keep trying, so the
// update resumes by itself once a budget allows it. When the kubelet
// reports the desired version the node is uncordoned, but only if this
// updater cordoned it: a node someone else had cordoned stays cordoned. A
// failed update leaves the node cordoned, so its pods do not come back to a
// half-upgraded node. On a single-node cluster evicted pods have nowhere to
// go until the node is uncordoned, and a budget that requires them
// available blocks until the deadline: use WithoutDrain there, or relax
// the budget.
//
// # Observability
//
// Everything the updater does is visible four ways, with stable names that
// are exported constants:
//
//   - a Node condition, ConditionInPlaceUpdate, with the reasons
//     ReasonPending, ReasonDraining, ReasonDrainBlocked, ReasonUpgrading,
//     ReasonWaitingForKubelet, ReasonSucceeded and ReasonFailed, written
//     with a strategic-merge patch of the status that touches only that
//     condition (no resourceVersion, so it never conflicts with the
//     kubelet's status updates, which leave foreign conditions alone);
//   - Kubernetes Events on the Machine in the management cluster
//     (WithEventRecorder; reasons EventReasonUpdateStarted,
//     EventReasonNodeDrained, EventReasonDrainBlocked,
//     EventReasonUpdateSucceeded, EventReasonUpdateFailed), recorded on
//     transitions read from the Node, so a restarted extension does not
//     repeat them;
//   - Prometheus metrics (NewMetrics, on controller-runtime's registry by
//     default): MetricDecisions for the CanUpdate* answers, and
//     MetricMachinesInProgress, MetricFailures and MetricUpdateDuration for
//     UpdateMachine; see Metrics for what the in-progress gauge means with
//     several replicas;
//   - logr logs with the keys hook, machine, cluster, node, phase and step:
//     transitions at V(0), each in-progress answer at V(1). Declines are
//     logged with the uncovered fields (names and categories, never values).
package strategy
