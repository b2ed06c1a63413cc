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
// the Node, kubeadm-config) so a restarted extension carries on, and
// answers done only when the kubelet reports the desired version. It does
// not drain the node first yet.
package strategy
