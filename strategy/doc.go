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
// Not here yet: strategies composed in an ordered list, rollout planning
// under budgets, the CAPI hook handlers. They build on this core.
package strategy
