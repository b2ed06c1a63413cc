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
// fields. NewPolicy is the declarative form: ordered rules (category and/or
// path → InPlace, Replace or Ignore) with a default.
//
// A Decision carries the changes applied in place as a diff.ChangeSet, so
// its JSONPatch and MergePatch are what a CanUpdateMachine response needs.
//
// # The in-place contract
//
// Accepting a change in place is a promise: once Cluster API has an
// accept it cannot fall back to a replacement, it only calls UpdateMachine
// until that answers done or for ever. So every in-place path built on
// this package keeps three rules, and strategy/capi enforces them with
// tests:
//
//   - accept only what an executor applies: a change is accepted in place
//     only if an executor applies it on the node and verifies it there. A
//     category with no executor is never in a default accepted set
//     (KubeadmCategories holds only the Kubernetes version, which the
//     kubeadm plans of nodeexec/kubeadm apply and verify; the kubelet's
//     extra arguments, KubeletExtraArgsPaths, the control plane's static
//     pod configuration, ControlPlaneConfigPaths, and the KubeadmConfig's
//     files, FilesPaths, are applied and verified by the same executor);
//   - refuse what cannot be applied before accepting: feasibility (a
//     version a kubeadm plan can reach, an upgrader image for it, the
//     caller's own checks) is checked at CanUpdate* time, and what cannot
//     pass by itself is declined with the reason, so Cluster API replaces
//     the machine (what may pass, an upgrader image not configured yet
//     for the version, is a Failure Cluster API asks again about);
//   - apply and verify all that was accepted before answering done; an
//     ignored change (Rule with ActionIgnore) is accepted without being
//     applied, and recorded in the patches so Cluster API sees nothing left
//     to roll.
//
// An Updater that covers a category is therefore a claim about an
// executor: ForCategories, ForPaths and NewUpdater describe coverage, and
// the caller who adds one must also run the code that applies it.
//
// Strategies are values behind one interface, composed in an ordered list
// like Karpenter's disruption methods: InPlaceStrategy,
// RollingReplaceStrategy (maxSurge/maxUnavailable rounded like
// Kubernetes), ReplaceFirstStrategy, OnDeleteStrategy, FallbackStrategy (in
// place, else replace) and NeverReplaceStrategy (report Blocked instead).
// A Planner turns a Cluster (control plane, worker groups, per-machine
// changes, budgets with UTC cron windows) into an ordered RolloutPlan of batches:
// control plane first and one machine at a time, no version skew, no batch
// over maxUnavailable, maxSurge or a disruption budget, do-not-disrupt and
// PDB-blocked machines skipped with a reason, canary waves, a circuit
// breaker. The plan is a value, rendered as JSON or a table before
// anything happens.
//
// The Cluster API runtime side (the CanUpdateMachine, CanUpdateMachineSet
// and UpdateMachine hook handlers, drain before update, observability,
// workload cluster clients) lives in package strategy/capi, so that this
// package stays pure: it needs no cluster and no Cluster API runtime.
package strategy
